"""Compile cache: (constraint, backend, whitespace policy, tokenizer fingerprint) ->
compiled constraint. Compiles run in the background so callers can show progress; the
character DFA (the part that can explode) is built in a worker process that is killed
when it exceeds the time limit, so a request never hangs on it."""

from __future__ import annotations

import concurrent.futures as cf
import multiprocessing
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass

from .backends import CompiledConstraint, TokenizerContext, get_backend
from .constraint import Constraint
from .errors import CfsmError
from .regex_dfa import DEFAULT_MAX_STATES, CharDFA, build_char_dfa

DEFAULT_COMPILE_TIMEOUT_S = 20.0


def _dfa_job(pattern: str, max_states: int):
    try:
        return ("ok", build_char_dfa(pattern, max_states))
    except CfsmError as exc:
        return ("error", exc.kind, exc.message)


class DfaWorker:
    """A killable process that builds character DFAs."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._pool: cf.ProcessPoolExecutor | None = None

    def _get_pool(self) -> cf.ProcessPoolExecutor:
        if self._pool is None:
            self._pool = cf.ProcessPoolExecutor(max_workers=1, mp_context=multiprocessing.get_context("spawn"))
        return self._pool

    def build(self, pattern: str, max_states: int, timeout_s: float) -> CharDFA:
        with self._lock:
            pool = self._get_pool()
            fut = pool.submit(_dfa_job, pattern, max_states)
            try:
                res = fut.result(timeout=timeout_s)
            except cf.TimeoutError:
                self._kill()
                raise CfsmError(
                    "compile_timeout",
                    f"building the automaton took longer than {timeout_s:g} s (the regex is probably "
                    "exponential, e.g. a counted repeat after an unbounded one)",
                ) from None
            except cf.process.BrokenProcessPool:
                self._kill()
                raise CfsmError("state_explosion", "the automaton builder ran out of resources") from None
        if res[0] == "error":
            raise CfsmError(res[1], res[2])
        return res[1]

    def _kill(self) -> None:
        pool, self._pool = self._pool, None
        if pool is None:
            return
        for p in list(getattr(pool, "_processes", {}).values()):
            try:
                p.kill()
            except Exception:  # noqa: BLE001
                pass
        pool.shutdown(wait=False, cancel_futures=True)

    def close(self) -> None:
        with self._lock:
            self._kill()


@dataclass
class CompileResult:
    compiled: CompiledConstraint
    dfa: CharDFA | None
    dfa_error: str | None
    seconds: float


class CompileCache:
    """Thread-safe, bounded, shared by every request of a process."""

    def __init__(
        self,
        ctx: TokenizerContext,
        max_states: int = DEFAULT_MAX_STATES,
        timeout_s: float = DEFAULT_COMPILE_TIMEOUT_S,
        capacity: int = 64,
        cache_dir=None,
        use_worker: bool = True,
    ) -> None:
        self.ctx = ctx
        self.max_states = max_states
        self.timeout_s = timeout_s
        self.capacity = capacity
        self.cache_dir = cache_dir
        self._threads = cf.ThreadPoolExecutor(max_workers=2, thread_name_prefix="cfsm-compile")
        self._futures: OrderedDict[tuple, cf.Future] = OrderedDict()
        self._dfas: dict[str, cf.Future] = {}
        self._lock = threading.Lock()
        self._worker = DfaWorker() if use_worker else None

    def key(self, constraint: Constraint, backend: str) -> tuple:
        return (constraint.kind, constraint.text, backend, constraint.whitespace, self.ctx.fingerprint)

    def _build_dfa(self, pattern: str) -> CharDFA:
        if self._worker is None:
            return build_char_dfa(pattern, self.max_states)
        return self._worker.build(pattern, self.max_states, self.timeout_s)

    def dfa(self, constraint: Constraint) -> CharDFA:
        """The character DFA of a regex/schema constraint (cached)."""
        pattern = constraint.regex()
        if pattern is None:
            raise CfsmError("unsupported_feature", "grammars have no finite automaton to show")
        with self._lock:
            fut = self._dfas.get(pattern)
            if fut is None:
                fut = cf.Future()
                self._dfas[pattern] = fut
                owner = True
            else:
                owner = False
        if owner:
            try:
                fut.set_result(self._build_dfa(pattern))
            except BaseException as exc:  # noqa: BLE001
                fut.set_exception(exc)
                with self._lock:
                    self._dfas.pop(pattern, None)
        return fut.result()

    def _compile(self, constraint: Constraint, backend: str) -> CompileResult:
        t0 = time.perf_counter()
        dfa, dfa_error = None, None
        if constraint.kind != "grammar":
            try:
                dfa = self.dfa(constraint)
            except CfsmError as exc:
                if backend in ("fsm", "outlines") or exc.kind in ("invalid_regex", "invalid_schema", "unsatisfiable", "input_too_large"):
                    raise
                dfa_error = exc.message
        compiled = get_backend(backend).compile(constraint, self.ctx, dfa=dfa, cache_dir=self.cache_dir)
        return CompileResult(compiled, dfa, dfa_error, time.perf_counter() - t0)

    def submit(self, constraint: Constraint, backend: str) -> cf.Future:
        get_backend(backend)  # unknown names fail here, synchronously
        k = self.key(constraint, backend)
        with self._lock:
            fut = self._futures.get(k)
            if fut is not None and not (fut.done() and fut.exception() is not None):
                self._futures.move_to_end(k)
                return fut
            fut = self._threads.submit(self._compile, constraint, backend)
            self._futures[k] = fut
            while len(self._futures) > self.capacity:
                self._futures.popitem(last=False)
            return fut

    def get(self, constraint: Constraint, backend: str, timeout_s: float | None = None) -> CompileResult:
        fut = self.submit(constraint, backend)
        try:
            return fut.result(timeout=timeout_s if timeout_s is not None else self.timeout_s + 10)
        except cf.TimeoutError:
            raise CfsmError("compile_timeout", f"compiling took longer than {self.timeout_s:g} s") from None
        except CfsmError:
            raise
        except Exception as exc:  # noqa: BLE001 - a library failure becomes an error object
            raise CfsmError("compile_failed", f"{backend} failed to compile: {exc}") from exc

    def close(self) -> None:
        if self._worker is not None:
            self._worker.close()
        self._threads.shutdown(wait=False, cancel_futures=True)
