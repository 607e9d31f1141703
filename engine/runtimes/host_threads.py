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
import os
from collections.abc import Iterator
from contextlib import contextmanager


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
    import torch

    # torch reads its thread count into each thread once, on first use: read it here first,
    # or that first use would overwrite the setting made here
    before = torch.get_num_threads()
    _set_openmp_threads(1)
    try:
        yield torch.get_num_threads() == 1
    finally:
        _set_openmp_threads(before)
