"""Compile cache: (constraint, backend, whitespace policy, tokenizer fingerprint) ->
compiled constraint. Compiles run in the background so callers can show progress; the
character DFA (the part that can explode) is built in a worker process that is killed
when it exceeds the time limit, so a request never hangs on it."""

from __future__ import annotations

import concurrent.futures as cf
import os
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from ..backends import CompiledConstraint, TokenizerContext, get_backend
from ..constraint import Constraint
from ..errors import CfsmError
from ..limits import CACHE_BUDGET_MB, WORKER_RSS_MB
from ..limits import COMPILE_TIMEOUT_S as DEFAULT_COMPILE_TIMEOUT_S
from ..regex.dfa import DEFAULT_MAX_STATES, CharDFA, build_char_dfa
from .lru import ByteLRU


def rss_bytes(pid: int) -> int:
    """Resident memory of a process (Linux /proc; 0 where unavailable)."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


class DfaWorker:
    """A killable subprocess (engine.serving.dfa_worker) that builds character DFAs."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._proc: subprocess.Popen | None = None

    def _get(self) -> subprocess.Popen:
        if self._proc is None or self._proc.poll() is not None:
            root = str(Path(__file__).resolve().parents[2])
            env = dict(os.environ)
            env["PYTHONPATH"] = root + (
                os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else ""
            )
            self._proc = subprocess.Popen(
                [sys.executable, "-m", "engine.serving.dfa_worker"],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
                env=env,
                cwd=root,
            )
        return self._proc

    def build(self, pattern: str, max_states: int, timeout_s: float, max_chars: int) -> CharDFA:
        from .dfa_worker import _read, _write

        with self._lock:
            proc = self._get()
            box: dict = {}

            def talk() -> None:
                try:
                    _write(proc.stdin, (pattern, max_states, max_chars))
                    box["res"] = _read(proc.stdout)
                except Exception as exc:  # noqa: BLE001
                    box["exc"] = exc

            t = threading.Thread(target=talk, daemon=True)
            t.start()
            t.join(timeout_s)
            if t.is_alive():
                self._kill()
                t.join(1.0)
                from ..regex.dfa import slow_hint

                raise CfsmError(
                    "compile_timeout",
                    f"building the automaton took longer than {timeout_s:g} s "
                    f"({slow_hint(pattern)})",
                )
            res = box.get("res")
            if res is None:
                self._kill()
                raise CfsmError(
                    "compile_failed", "the automaton builder stopped unexpectedly (out of memory?)"
                )
            self._recycle_if_large()
        if res[0] == "error":
            raise CfsmError(res[1], res[2])
        return res[1]

    def _recycle_if_large(self) -> None:
        """Python rarely returns freed memory: a worker that grew past its limit is ended
        (the next build starts a fresh one)."""
        if self._proc is not None and rss_bytes(self._proc.pid) > WORKER_RSS_MB * 1024 * 1024:
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


class DfaWorkerPool:
    """A few killable workers, so one pathological regex (held until its time limit)
    does not hold up the automata of other sessions."""

    def __init__(self, size: int = 2) -> None:
        import queue

        self._free: queue.Queue[DfaWorker] = queue.Queue()
        self._all = [DfaWorker() for _ in range(max(1, size))]
        for w in self._all:
            self._free.put(w)

    def build(self, pattern: str, max_states: int, timeout_s: float, max_chars: int) -> CharDFA:
        w = self._free.get()
        try:
            return w.build(pattern, max_states, timeout_s, max_chars)
        finally:
            self._free.put(w)

    def close(self) -> None:
        for w in self._all:
            w.close()


@dataclass
class CompileResult:
    compiled: CompiledConstraint
    dfa: CharDFA | None
    dfa_error: str | None
    seconds: float


FAILURE_TTL_S = 600.0


def dfa_nbytes(dfa: CharDFA) -> int:
    """Approximate memory of an automaton with its compressed view and JSON (cached on it)."""
    edges = sum(len(row) for row in dfa.trans)
    extra = 2 if dfa.view is not None else 1
    return 200 * edges * extra + 64 * 1024


def _result_nbytes(fut: cf.Future) -> int:
    """Entries are futures: in flight or failed they hold next to nothing."""
    if not fut.done() or fut.cancelled() or fut.exception() is not None:
        return 1024
    res = fut.result()
    if isinstance(res, CharDFA):
        return dfa_nbytes(res)
    # its automaton too: it lives as long as this entry, whatever happens to the automaton's own
    # key (counted twice while both are cached, which errs on the side of evicting)
    return res.compiled.nbytes() + (dfa_nbytes(res.dfa) if res.dfa is not None else 0)


class CompileCache:
    """Thread-safe and shared by every request of a process. Compiled constraints and
    automata live in one least-recently-used map bounded by bytes (CFSM_CACHE_BUDGET_MB).
    Failures that are the constraint's fault (CfsmError: timeout, state explosion, ...)
    are cached too, so their time limit is paid once, and an automaton's failure is
    shared by every backend that needs that automaton."""

    def __init__(
        self,
        ctx: TokenizerContext,
        max_states: int = DEFAULT_MAX_STATES,
        timeout_s: float = DEFAULT_COMPILE_TIMEOUT_S,
        budget_bytes: int | None = None,
        use_worker: bool = True,
    ) -> None:
        self.ctx = ctx
        self.max_states = max_states
        self.timeout_s = timeout_s
        self._threads = cf.ThreadPoolExecutor(max_workers=2, thread_name_prefix="cfsm-compile")
        budget = budget_bytes if budget_bytes is not None else CACHE_BUDGET_MB * 1024 * 1024
        # a compile in flight is never evicted: its callers would start it again
        self.lru = ByteLRU(budget, _result_nbytes, pinned=lambda fut: not fut.done())
        self._lock = threading.Lock()
        self._worker = DfaWorkerPool(2) if use_worker else None
        self.dfa_builds = 0

    def key(self, constraint: Constraint, backend: str) -> tuple:
        return (
            constraint.key,
            backend,
            self.ctx.fingerprint,
        )  # the constraint's key covers all its fields

    def _build_dfa(self, pattern: str, max_chars: int) -> CharDFA:
        self.dfa_builds += 1
        if self._worker is None:
            return build_char_dfa(pattern, self.max_states, max_chars)
        return self._worker.build(pattern, self.max_states, self.timeout_s, max_chars)

    def _cached(self, key: tuple) -> cf.Future | None:
        """A cached future unless it failed for a reason worth retrying: a library crash or
        a dead worker, or a constraint error older than FAILURE_TTL_S (a time limit hit under
        load may pass later)."""
        fut = self.lru.get(key)
        if fut is None:
            return None
        if fut.done() and not fut.cancelled() and fut.exception() is not None:
            exc = fut.exception()
            stale = (
                time.monotonic() - getattr(fut, "cfsm_failed_at", time.monotonic()) > FAILURE_TTL_S
            )
            if not isinstance(exc, CfsmError) or exc.kind == "compile_failed" or stale:
                self.lru.pop(key)
                return None
        return fut

    def _watch(self, key: tuple, fut: cf.Future) -> None:
        """Re-measure an entry once it completes (it was sized as in flight)."""

        def done(f: cf.Future) -> None:
            if not f.cancelled() and f.exception() is not None:
                f.cfsm_failed_at = time.monotonic()
            self.lru.remeasure(key)

        fut.add_done_callback(done)

    def dfa(self, constraint: Constraint) -> CharDFA:
        """The character DFA of a regex/schema constraint (cached, failures included)."""
        pattern = constraint.regex()
        if pattern is None:
            raise CfsmError("unsupported_feature", "grammars have no finite automaton to show")
        # regexes derived from schemas are long by nature; the state limit governs them
        max_chars = constraint.max_regex_chars
        key = ("dfa", pattern, max_chars)
        with self._lock:
            fut = self._cached(key)
            owner = fut is None
            if owner:
                fut = cf.Future()
                self._watch(key, fut)
                self.lru.put(key, fut)
        if owner:
            try:
                fut.set_result(self._build_dfa(pattern, max_chars))
            except BaseException as exc:  # noqa: BLE001
                fut.set_exception(exc)
        return fut.result()

    def _compile(self, constraint: Constraint, backend: str) -> CompileResult:
        t0 = time.perf_counter()
        dfa, dfa_error = None, None
        if constraint.kind != "grammar":
            try:
                dfa = self.dfa(constraint)
            except CfsmError as exc:
                # fsm and outlines need the automaton; native backends only lose the FSM view
                if get_backend(backend).needs_automaton or constraint.kind == "regex":
                    raise
                dfa_error = exc.message
        compiled = get_backend(backend).compile(constraint, self.ctx, dfa=dfa)
        return CompileResult(compiled, dfa, dfa_error, time.perf_counter() - t0)

    def submit(self, constraint: Constraint, backend: str) -> cf.Future:
        get_backend(backend)  # unknown names fail here, synchronously
        k = self.key(constraint, backend)
        with self._lock:
            fut = self._cached(k)
            if fut is None:
                fut = self._threads.submit(self._compile, constraint, backend)
                self.lru.put(k, fut)
                self._watch(k, fut)
            return fut

    def get(
        self, constraint: Constraint, backend: str, timeout_s: float | None = None
    ) -> CompileResult:
        fut = self.submit(constraint, backend)
        try:
            return fut.result(timeout=timeout_s if timeout_s is not None else self.timeout_s + 10)
        except cf.TimeoutError:
            raise CfsmError(
                "compile_timeout", f"compiling took longer than {self.timeout_s:g} s"
            ) from None
        except CfsmError:
            raise
        except Exception as exc:  # noqa: BLE001 - a library failure becomes an error object
            raise CfsmError("compile_failed", f"{backend} failed to compile: {exc}") from exc

    def stats(self) -> dict:
        return self.lru.stats()

    def close(self) -> None:
        if self._worker is not None:
            self._worker.close()
        self._threads.shutdown(wait=False, cancel_futures=True)
