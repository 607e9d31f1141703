"""Torch's CPU ops on one core for the thread that drives llama.cpp, every other thread
left as it was.

The scheduler samples each step with a few vocabulary-wide torch ops (a softmax, two
top-k, a masked sum: `engine.decoding.sampling`). On a CPU torch splits each over
OpenMP's threads, and OpenMP's second thread then spins for a few milliseconds waiting
for the next one: with one such op after every llama.cpp step it never sleeps, and on a
2-core machine it holds the core the page's own work (the browser, the web server) needs
during a run. Measured on the served page (character preset): that thread took 0.76 s of
CPU in a 1.4 s run, 0.36 s with the ops on one thread (one run each); over 10 alternating
pairs sampling took 0.92 ms a step against 1.62 ms, and the run reached its step view
0.09 s sooner. With the page idle the ops cost 0.1 ms more a step on one thread (0.7
against 0.6 ms).
"""

from __future__ import annotations

import ctypes
import functools
import os
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from typing import TypeVar

from ..lazy import lazy_module

torch = lazy_module("torch")


def _set_openmp_threads(n: int) -> None:
    try:
        gomp = ctypes.CDLL("libgomp.so.1", mode=os.RTLD_NOLOAD)  # torch's, already loaded
        gomp.omp_set_num_threads(n)
    except (OSError, AttributeError):
        pass


@contextmanager
def torch_ops_on_one_thread() -> Iterator[bool]:
    """While the context lasts, torch's CPU ops issued from the calling thread run on that
    thread alone; on exit the thread's count is put back. OpenMP's thread count is a
    per-thread setting, so other threads (a transformers decode loop among them) keep
    theirs; `torch.set_num_threads` would also change the default of every thread started
    later. Yields whether it applied (False where torch does not run on GNU's libgomp);
    never raises."""
    # torch reads its thread count into each thread once, on first use: read it here first,
    # or that first use would overwrite the setting made here
    before = torch.get_num_threads()
    _set_openmp_threads(1)
    try:
        yield torch.get_num_threads() == 1
    finally:
        _set_openmp_threads(before)


T = TypeVar("T")


class OwnThread:
    """Runs calls on one long-lived thread of its own, so that a native library's OpenMP
    team is made once, whichever thread asks.

    libgomp keeps a team of workers for every thread that ever started a parallel region,
    for as long as that thread lives, and once it manages more threads than there are CPUs
    it stops spinning at barriers and sleeps in the kernel instead (its "throttled" wait).
    A llama.cpp pass crosses hundreds of barriers: with passes asked for from two
    long-lived threads (the server's batcher and a benchmark's own loop, or a cost-model
    re-measure on a request's thread), a 2-thread step took twice as long, and every step
    then ran on one thread (`cfsm bench batch`, one request at a time: 22 against 14 ms a
    token). With every pass on one such thread (`cpu_pass_thread`), one team exists
    however many threads, runtimes and models ask."""

    def __init__(self, name: str) -> None:
        self._ident: int | None = None
        self._pool = ThreadPoolExecutor(1, thread_name_prefix=name, initializer=self._mark)

    def _mark(self) -> None:
        self._ident = threading.get_ident()

    def is_current(self) -> bool:
        """Whether the calling thread is this one (a call running on it)."""
        return threading.get_ident() == self._ident

    def call(self, fn: Callable[..., T], *args) -> T:
        """`fn(*args)` run on the thread, the caller waiting; its result returned, its
        exception raised here. Calls from several threads run one at a time, in turn; a
        call made on the thread itself runs at once (waiting for its own turn would never
        end)."""
        if self.is_current():
            return fn(*args)
        return self._pool.submit(fn, *args).result()


@functools.cache
def cpu_pass_thread() -> OwnThread:
    """The thread every CPU forward pass of the process runs on, whichever runtime and
    model: one OpenMP team (see OwnThread). Passes of two models take turns, as they would
    take turns for the same cores anyway."""
    return OwnThread("cpu-pass")


def _cgroup_cpu_quota(root: str = "/sys/fs/cgroup") -> float | None:
    """CPUs the container's quota allows (`docker run --cpus=2` writes it), or None when
    none is set: cgroup v2's `cpu.max` ("200000 100000"), else v1's cfs quota and period."""
    try:
        with open(os.path.join(root, "cpu.max")) as f:
            quota, period = f.read().split()[:2]
        return None if quota == "max" else int(quota) / int(period)
    except (OSError, ValueError):
        pass
    try:
        with open(os.path.join(root, "cpu", "cpu.cfs_quota_us")) as f:
            quota_us = int(f.read())
        with open(os.path.join(root, "cpu", "cpu.cfs_period_us")) as f:
            period_us = int(f.read())
        return None if quota_us <= 0 else quota_us / period_us
    except (OSError, ValueError):
        return None


def usable_cpus(cgroup_root: str = "/sys/fs/cgroup") -> int:
    """The CPUs this process may run on: its affinity mask (taskset, a container's cpuset)
    and its cgroup quota, not the host's count (`os.cpu_count()` says 64 in a 2-CPU
    container on a 64-core host, and 64 threads then fight over 2 CPUs). Never fails."""
    try:
        n = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        n = os.cpu_count() or 1
    quota = _cgroup_cpu_quota(cgroup_root)
    if quota is not None:
        n = min(n, max(1, int(quota + 0.5)))
    return max(1, n)
