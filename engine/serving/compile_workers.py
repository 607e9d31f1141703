"""The killable compile workers: subprocesses (engine.serving.compile_worker) that build
character DFAs and run the compiles of libraries that cannot be interrupted, killed at a
job's time limit or past their memory cap, and the pool the compile cache shares. `Clock`
is one compile's time limit, the wait for a worker and its setup left out."""

from __future__ import annotations

import os
import queue
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import NamedTuple

from ..backends import TokenizerContext, get_backend
from ..constraint import Constraint
from ..errors import CfsmError
from ..limits import COMPILE_MEMORY_MB, WORKER_RSS_MB
from ..regex.dfa import CharDFA, slow_hint
from ..schema import parse_schema
from .compile_worker import read_message, write_message
from .memory import rss_bytes


class LiveAutomaton(NamedTuple):
    """What a check while typing learnt of the automaton: it, or why not ('busy': not
    tried now; 'slow': longer than the check's budget)."""

    dfa: CharDFA | None
    why_not: str


class Clock:
    """A compile's one time limit: what is left of it, less the time that is not the
    compile's own (waiting for a worker, a fresh worker's setup), which callers exclude."""

    def __init__(self, limit_s: float) -> None:
        self.limit_s, self._t0, self._excluded = limit_s, time.monotonic(), 0.0

    def exclude(self, seconds: float) -> None:
        self._excluded += max(0.0, seconds)

    def left(self) -> float:
        return self.limit_s - (time.monotonic() - self._t0 - self._excluded)


class CompileWorker:
    """A killable subprocess (engine.serving.compile_worker) that builds character DFAs
    and runs the compiles of backends that cannot be interrupted. While a job runs, its
    memory is watched: past COMPILE_MEMORY_MB it is killed (`compile_memory`), past its
    deadline too (`compile_timeout`), so the answer comes at the stated limit and nothing
    keeps running after it."""

    POLL_S = 0.05

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._proc: subprocess.Popen | None = None
        self._vocabs: set[tuple] = set()  # (tokenizer, backend) this process was set up for
        self._set_up_bytes = 0  # its memory once set up (see _recycle_if_large)

    def _get(self) -> subprocess.Popen:
        if self._proc is None or self._proc.poll() is not None:
            root = str(Path(__file__).resolve().parents[2])
            env = dict(os.environ)
            env["PYTHONPATH"] = root + (
                os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else ""
            )
            self._proc = subprocess.Popen(
                [sys.executable, "-m", "engine.serving.compile_worker"],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
                env=env,
                cwd=root,
            )
            self._vocabs, self._set_up_bytes = set(), 0
        return self._proc

    def _ask(self, req: tuple, timeout_s: float, timeout_msg: str, recycle: bool = True):
        """One job, answered within `timeout_s` or ended by a kill; the caller holds the lock.
        `recycle` False for the setup jobs: a worker ended between its setup and the job it
        was set up for would get that job with no vocabulary; nor does the memory cap apply
        to them (they import the libraries and index the vocabulary, no user's input; the
        time limit still does)."""

        proc = self._get()
        box: dict = {}

        def talk() -> None:
            try:
                write_message(proc.stdin, req)
                box["res"] = read_message(proc.stdout)
            except Exception as exc:  # noqa: BLE001
                box["exc"] = exc

        t = threading.Thread(target=talk, daemon=True)
        t.start()
        deadline = time.monotonic() + max(0.0, timeout_s)
        cap = self._memory_cap() if recycle else float("inf")
        while t.is_alive():
            t.join(min(self.POLL_S, max(0.0, deadline - time.monotonic())))
            if not t.is_alive():
                break
            if rss_bytes(proc.pid) > cap:
                self._kill()
                raise CfsmError(
                    "compile_memory",
                    f"compiling needed more than {cap // 2**20:,} MB of memory "
                    f"(CFSM_COMPILE_MEMORY_MB={COMPILE_MEMORY_MB}, above the set-up worker)",
                )
            if time.monotonic() >= deadline:
                self._kill()
                raise CfsmError("compile_timeout", timeout_msg)
        res = box.get("res")
        if res is None:
            self._kill()
            raise CfsmError(
                "compile_failed", "the compile worker stopped unexpectedly (out of memory?)"
            )
        if recycle:
            self._recycle_if_large()
        if res[0] == "error":
            raise CfsmError(res[1], res[2])
        return res[1]

    def build(self, pattern: str, max_states: int, timeout_s: float, max_chars: int) -> CharDFA:
        msg = f"building the automaton took longer than {timeout_s:.2g} s"
        try:
            with self._lock:
                return self._ask(("dfa", pattern, max_states, max_chars), timeout_s, msg)
        except CfsmError as exc:  # the hint only when it is needed: it parses the pattern
            if exc.kind != "compile_timeout":
                raise
            raise CfsmError("compile_timeout", f"{msg} ({slow_hint(pattern)})") from None

    def try_build(
        self, pattern: str, max_states: int, timeout_s: float, max_chars: int
    ) -> LiveAutomaton:
        """`build` for checks while typing, which must neither wait nor hold anything up:
        'busy' at once when this worker is, 'slow' (the job killed) past `timeout_s`; a
        fresh process starts before the clock does. Raises CfsmError for the constraint's
        own failures (state explosion, ...)."""
        if not self._lock.acquire(blocking=False):
            return LiveAutomaton(None, "busy")
        try:
            if self._proc is None or self._proc.poll() is not None:  # start-up is not the job's
                self._ask(("dfa", "a", 10, 10), 120.0, "starting a compile worker took too long")
            dfa = self._ask(("dfa", pattern, max_states, max_chars), timeout_s, "slow")
            return LiveAutomaton(dfa, "")
        except CfsmError as exc:
            if exc.kind == "compile_timeout":
                return LiveAutomaton(None, "slow")
            raise
        finally:
            self._lock.release()

    def compile_native(
        self, backend: str, ctx: TokenizerContext, constraint: Constraint, dfa, clock: Clock
    ) -> bytes:
        """The backend's own compile, in this process, within what `clock` has left;
        returns its payload. A fresh process is sent the vocabulary and sets up the
        library's view of it first (once per process and backend): that, and waiting for
        this worker, are handed to `clock` as not the compile's."""
        t_setup = time.monotonic()
        with self._lock:
            self._setup_locked(ctx, [backend])
            clock.exclude(time.monotonic() - t_setup)
            left = clock.left()
            msg = f"{backend} took longer than {left:.3g} s to compile this {constraint.kind}"
            return self._ask(("native", backend, ctx.fingerprint, constraint, dfa), left, msg)

    def setup(self, ctx: TokenizerContext, backends: list[str]) -> None:
        with self._lock:
            self._setup_locked(ctx, backends)

    def _setup_locked(self, ctx: TokenizerContext, backends: list[str]) -> None:
        self._get()
        fp = ctx.fingerprint
        msg = "setting up a compile worker took longer than 120 s"
        if (fp, None) not in self._vocabs:
            req = ("vocab", fp, ctx.vocab.token_bytes, ctx.eos_token_id, ctx.tokenizer_json())
            self._ask(req, 120.0, msg, recycle=False)
            self._vocabs.add((fp, None))
        for backend in backends:
            if (fp, backend) not in self._vocabs:
                self._ask(("warm", backend, fp), 120.0, msg, recycle=False)
                self._vocabs.add((fp, backend))
        self._set_up_bytes = max(self._set_up_bytes, rss_bytes(self._proc.pid))

    def _memory_cap(self) -> int:
        """A compile's memory cap: CFSM_COMPILE_MEMORY_MB, or what the worker held once set
        up plus half of that, whichever is larger. The cap bounds what a compile adds; a
        machine whose libraries alone come near it (torch's CUDA build, imported by
        xgrammar, takes ~0.4 GB more than the CPU build) would otherwise refuse every
        compile as `compile_memory`."""
        setting = COMPILE_MEMORY_MB * 1024 * 1024
        return max(setting, self._set_up_bytes + setting // 2)

    def _recycle_if_large(self) -> None:
        """Python rarely returns freed memory: a worker that grew past its limit is ended
        (the next job starts a fresh one). The limit is CFSM_WORKER_RSS_MB or twice what the
        worker held once set up, whichever is larger: a machine whose libraries alone pass
        the limit (torch's CUDA build is ~1 GB more) would otherwise end the worker after
        every compile and set up a new one for the next."""
        limit = max(WORKER_RSS_MB * 1024 * 1024, 2 * self._set_up_bytes)
        if self._proc is not None and rss_bytes(self._proc.pid) > limit:
            self.close_locked()

    def _kill(self) -> None:
        proc, self._proc = self._proc, None
        if proc is not None and proc.poll() is None:
            proc.kill()
            proc.wait(timeout=5)

    def close(self) -> None:
        with self._lock:
            self.close_locked()

    def close_locked(self) -> None:
        """End the worker politely (closing its input), then for sure; caller holds the lock."""
        if self._proc is not None and self._proc.poll() is None:
            try:
                self._proc.stdin.close()
                self._proc.wait(timeout=2)
            except Exception:  # noqa: BLE001
                pass
        self._kill()


def _warm_here(ctx: TokenizerContext, backends: list[str]) -> None:
    """This process's one-time costs that would otherwise land in a first compile's time
    limit: jsonschema's validators and format checkers (~2 s), the libraries' views of the
    vocabulary that loading a worker's result needs, fsm's token index's shared parts."""

    get_backend("fsm").warm(ctx)
    parse_schema('{"type": "object", "properties": {"a": {"type": "string", "format": "date"}}}')
    for name in backends:
        get_backend(name).warm(ctx)


class WorkerPool:
    """A few killable workers, so one pathological compile (held until its time limit)
    does not hold up the compiles of other sessions."""

    def __init__(self, size: int = 2) -> None:
        self.ready = threading.Event()
        self.ready.set()  # until `warm` is asked for: workers are then set up on first use
        self._free: queue.Queue[CompileWorker] = queue.Queue()
        self._all = [CompileWorker() for _ in range(max(1, size))]
        for w in self._all:
            self._free.put(w)

    def build(self, pattern: str, max_states: int, timeout_s: float, max_chars: int) -> CharDFA:
        w = self._free.get()
        try:
            return w.build(pattern, max_states, timeout_s, max_chars)
        finally:
            self._free.put(w)

    def compile_native(self, backend, ctx, constraint, dfa, clock: Clock) -> bytes:
        t0 = time.monotonic()
        w = self._free.get()
        clock.exclude(time.monotonic() - t0)  # waiting for a free worker is not the compile's
        try:
            return w.compile_native(backend, ctx, constraint, dfa, clock)
        finally:
            self._free.put(w)

    def warm(self, ctx: TokenizerContext, backends: list[str]) -> None:
        """Set every worker up for these backends in the background (vocabulary, library
        views), so that no compile pays it; `ready` is set when done."""

        self.ready.clear()

        def run(fn, *args) -> None:
            try:
                fn(*args)
            except Exception:  # noqa: BLE001 - a compile sets a worker up again if needed
                pass

        jobs = [(_warm_here, ctx, backends)] + [(w.setup, ctx, backends) for w in self._all]
        threads = [threading.Thread(target=run, args=j, daemon=True) for j in jobs]
        for t in threads:
            t.start()

        def done() -> None:
            for t in threads:
                t.join()
            self.ready.set()

        threading.Thread(target=done, daemon=True, name="cfsm-warm-workers").start()

    def close(self) -> None:
        for w in self._all:
            w.close()
