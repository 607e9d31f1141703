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
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path

from .backends import CompiledConstraint, TokenizerContext, get_backend
from .constraint import Constraint
from .errors import CfsmError
from .limits import COMPILE_TIMEOUT_S as DEFAULT_COMPILE_TIMEOUT_S
from .limits import MAX_REGEX_CHARS, MAX_SCHEMA_CHARS
from .regex_dfa import DEFAULT_MAX_STATES, CharDFA, build_char_dfa


class DfaWorker:
    """A killable subprocess (engine.dfa_worker) that builds character DFAs."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._proc: subprocess.Popen | None = None

    def _get(self) -> subprocess.Popen:
        if self._proc is None or self._proc.poll() is not None:
            root = str(Path(__file__).resolve().parent.parent)
            env = dict(os.environ)
            env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
            self._proc = subprocess.Popen(
                [sys.executable, "-m", "engine.dfa_worker"],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env, cwd=root,
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
                raise CfsmError(
                    "compile_timeout",
                    f"building the automaton took longer than {timeout_s:g} s (the regex is probably "
                    "exponential, e.g. a counted repeat after an unbounded one)",
                )
            res = box.get("res")
            if res is None:
                self._kill()
                raise CfsmError("compile_failed", "the automaton builder stopped unexpectedly (out of memory?)")
        if res[0] == "error":
            raise CfsmError(res[1], res[2])
        return res[1]

    def _kill(self) -> None:
        proc, self._proc = self._proc, None
        if proc is not None and proc.poll() is None:
            proc.kill()
            proc.wait(timeout=5)

    def close(self) -> None:
        with self._lock:
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
        self._worker = DfaWorkerPool(2) if use_worker else None

    def key(self, constraint: Constraint, backend: str) -> tuple:
        return (constraint.kind, constraint.text, backend, constraint.whitespace, self.ctx.fingerprint)

    def _build_dfa(self, pattern: str, max_chars: int) -> CharDFA:
        if self._worker is None:
            return build_char_dfa(pattern, self.max_states, max_chars)
        return self._worker.build(pattern, self.max_states, self.timeout_s, max_chars)

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
                # regexes derived from schemas are long by nature; the state limit governs them
                max_chars = MAX_REGEX_CHARS if constraint.kind == "regex" else 25 * MAX_SCHEMA_CHARS
                fut.set_result(self._build_dfa(pattern, max_chars))
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
                # fsm and outlines need the automaton; native backends only lose the FSM view
                if backend in ("fsm", "outlines") or constraint.kind == "regex":
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
