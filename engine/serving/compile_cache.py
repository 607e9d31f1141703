"""Compile cache: (constraint, backend, whitespace policy, tokenizer fingerprint) ->
compiled constraint. Compiles run in the background so callers can show progress; the
character DFA and the compiles of libraries that cannot be interrupted run in worker
processes that are killed at the time limit or the memory cap, so a request never hangs
on them and nothing runs on after its answer."""

from __future__ import annotations

import concurrent.futures as cf
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..backends import BACKENDS, CompiledConstraint, TokenizerContext, get_backend
from ..backends.choose import AUTO, NEXT_ON, ORDER, none_enforces, why_chosen
from ..constraint import Constraint
from ..errors import CfsmError
from ..limits import (
    AUTO_FIRST_S,
    CACHE_BUDGET_MB,
    LIVE_CHECK_S,
    VIEW_LIMIT_S,
)
from ..limits import COMPILE_TIMEOUT_S as DEFAULT_COMPILE_TIMEOUT_S
from ..regex.dfa import DEFAULT_MAX_STATES, CharDFA, build_char_dfa
from ..regex.normalize import normalize_regex
from .compile_workers import Clock, CompileWorker, LiveAutomaton, WorkerPool
from .lru import ByteLRU


@dataclass
class CompileResult:
    compiled: CompiledConstraint
    dfa: CharDFA | None
    dfa_error: str | None
    seconds: float
    backend: str = ""  # the backend that compiled it (`auto` chose it: `why` says why)
    why: str = ""


FAILURE_TTL_S = 600.0
# an automaton that failed these ways fails again for the FSM view of another backend
AUTOMATON_FAILURES = frozenset({"compile_timeout", "state_explosion", "compile_memory"})


def dfa_nbytes(dfa: CharDFA) -> int:
    """Approximate memory of an automaton with its compressed view and JSON (cached on it)."""
    edges = sum(len(row) for row in dfa.trans)
    extra = 2 if dfa.view is not None else 1
    return 200 * edges * extra + 64 * 1024


def _succeeded(fut: cf.Future | None) -> bool:
    """A cache entry that holds a result (done, not cancelled, no exception)."""
    return fut is not None and fut.done() and not fut.cancelled() and fut.exception() is None


def _result_nbytes(fut: cf.Future) -> int:
    """Entries are futures: in flight or failed they hold next to nothing."""
    if not _succeeded(fut):
        return 1024
    res = fut.result()
    if isinstance(res, CharDFA):
        return dfa_nbytes(res)
    if res is None or isinstance(res, bytes):  # a worker's payload, shared (`native_key`)
        return 1024 + len(res or b"")
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
        warm: bool = False,
    ) -> None:
        self.ctx = ctx
        self.max_states = max_states
        self.timeout_s = timeout_s
        self._threads = cf.ThreadPoolExecutor(max_workers=2, thread_name_prefix="cfsm-compile")
        budget = budget_bytes if budget_bytes is not None else CACHE_BUDGET_MB * 1024 * 1024
        # a compile in flight is never evicted: its callers would start it again
        self.lru = ByteLRU(budget, _result_nbytes, pinned=lambda fut: not fut.done())
        self._lock = threading.Lock()
        self._worker = WorkerPool(2) if use_worker else None
        self._live = CompileWorker() if use_worker else None  # checks while typing: its own
        if self._worker is not None and warm:  # a server: no first compile pays the setup
            self._worker.warm(ctx, [n for n in BACKENDS if get_backend(n).compiles_in_worker])
        self.dfa_builds = 0
        self.native_compiles = 0  # compiles sent to the workers (shared payloads not counted)
        # compiled-constraint lookups (`submit`) that found an entry, cached or compiling, and
        # that started a compile: the server's /metrics reads them
        self.hits = self.misses = 0

    def key(self, constraint: Constraint, backend: str) -> tuple:
        return (
            constraint.key,
            backend,
            self.ctx.fingerprint,
        )  # the constraint's key covers all its fields

    def _build_dfa(self, pattern: str, max_chars: int, timeout_s: float) -> CharDFA:
        self.dfa_builds += 1
        if self._worker is None:
            return build_char_dfa(pattern, self.max_states, max_chars)
        return self._worker.build(pattern, self.max_states, timeout_s, max_chars)

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

    def dfa(self, constraint: Constraint, timeout_s: float | None = None) -> CharDFA:
        """The character DFA of a regex/schema constraint (cached, failures included; a
        time limit hit with less than the full budget is not cached)."""
        budget = self.timeout_s if timeout_s is None else min(timeout_s, self.timeout_s)
        pattern = constraint.regex()
        if pattern is None:
            raise CfsmError("unsupported_feature", "grammars have no finite automaton to show")
        # regexes derived from schemas are long by nature; the state limit governs them
        max_chars = constraint.max_regex_chars
        short = budget < self.timeout_s  # its time limit says nothing of the full budget's
        return self._once(
            ("dfa", pattern, max_chars),
            lambda: self._build_dfa(pattern, max_chars, budget),
            forget=lambda exc: short and getattr(exc, "kind", "") == "compile_timeout",
        )

    def _once(self, key: tuple, make: Callable[[], Any], forget: Callable[[BaseException], bool]):
        """`make()`'s result for `key`, made once for every caller, concurrent or later, and
        cached (a failure too, as `_cached` keeps it, unless `forget(exc)`); raises what
        `make` raised."""
        with self._lock:
            fut = self._cached(key)
            owner = fut is None
            if owner:
                fut = cf.Future()
                self._watch(key, fut)
                self.lru.put(key, fut)
        if owner:
            try:
                fut.set_result(make())
            except BaseException as exc:  # noqa: BLE001 - cached, then raised to every caller
                if forget(exc):
                    with self._lock:
                        self.lru.pop(key)
                fut.set_exception(exc)
        return fut.result()

    def try_dfa(self, constraint: Constraint, budget_s: float = LIVE_CHECK_S) -> LiveAutomaton:
        """The automaton for a check while typing: cached, or built within `budget_s` by a
        worker of its own (it never waits for or holds the workers Run uses). A failure that
        is the constraint's fault (`state_explosion`, ...) is raised and cached as Run's
        would be; a built automaton is cached for Run. Not tried ('busy') while that worker
        or Run is already building it, or without workers; 'slow' past the budget (not
        cached: Run has the full limit)."""
        pattern = constraint.regex()
        if pattern is None:
            raise CfsmError("unsupported_feature", "grammars have no finite automaton to show")
        key = ("dfa", pattern, constraint.max_regex_chars)
        with self._lock:
            fut = self._cached(key)
        if fut is not None:
            return LiveAutomaton(fut.result(), "") if fut.done() else LiveAutomaton(None, "busy")
        if self._live is None:
            return LiveAutomaton(None, "busy")
        fut = cf.Future()
        try:
            got = self._live.try_build(
                pattern, self.max_states, budget_s, constraint.max_regex_chars
            )
        except CfsmError as exc:
            fut.set_exception(exc)
            fut.cfsm_failed_at = time.monotonic()
            self._keep(key, fut)
            raise
        if got.dfa is not None:
            fut.set_result(got.dfa)
            self._keep(key, fut)
        return got

    def _keep(self, key: tuple, fut: cf.Future) -> None:
        """Cache a finished automaton future unless Run has started its own meanwhile."""
        with self._lock:
            if self.lru.get(key) is None:
                self.lru.put(key, fut)

    def _compile(
        self,
        constraint: Constraint,
        backend: str,
        limit_s: float | None = None,
        no_view: str = "",
    ) -> CompileResult:
        """One time limit for the whole compile (`limit_s`, else the cache's). A backend
        that decodes over the automaton builds it first and compiles in what is left; a
        native backend compiles first, and the automaton (only its FSM view) gets what is
        left. Waiting for a worker and a fresh worker's one-time setup are not counted."""
        if backend == AUTO:
            return self._compile_auto(constraint)
        t0 = time.perf_counter()
        impl = get_backend(backend)
        clock = Clock(min(limit_s, self.timeout_s) if limit_s else self.timeout_s)
        left, whole = clock.left, limit_s is None or limit_s >= self.timeout_s
        dfa, dfa_error, compiled = None, None, None
        if not impl.needs_automaton:
            compiled = impl.compile(constraint, self.ctx, worker=self._native_runner(clock, whole))
        view_only = compiled is not None and constraint.kind == "schema"
        view_s = min(left(), VIEW_LIMIT_S) if view_only else left()
        if view_only and no_view:  # `auto` saw the automaton fail already: not again
            dfa_error = no_view
        elif constraint.kind != "grammar" and view_s <= 0.05:
            dfa_error = "no time was left to build the automaton after the native compile"
        elif constraint.kind != "grammar":
            try:
                # first (the backend needs it): all the budget; after a native compile, only
                # for the FSM view: what is left, at most VIEW_LIMIT_S
                full = compiled is None and limit_s is None
                dfa = self.dfa(constraint, timeout_s=None if full else view_s)
            except CfsmError as exc:
                if impl.needs_automaton or constraint.kind == "regex":
                    raise
                # a native backend only loses the FSM view
                dfa_error = f"the FSM view was not built (CFSM_VIEW_LIMIT_S): {exc.message}"
        if compiled is None:
            compiled = impl.compile(
                constraint, self.ctx, dfa=dfa, worker=self._native_runner(clock, whole)
            )
        return CompileResult(compiled, dfa, dfa_error, time.perf_counter() - t0, backend)

    def _compile_auto(self, constraint: Constraint) -> CompileResult:
        """The first backend in `ORDER` that compiles the constraint; a failure another
        backend may not have moves on, any other is the answer (engine.backends.choose)."""
        t0, tried, order, no_view = time.perf_counter(), [], ORDER[constraint.kind], ""
        for i, name in enumerate(order):
            # a backend with others after it has AUTO_FIRST_S: fsm compiles every schema of
            # the shared sample it can in 4.4 s at most; past that it explodes or times out,
            # and the user waited its whole limit before llguidance was tried
            limit = AUTO_FIRST_S if i < len(order) - 1 else None
            try:
                res = self._compile(constraint, name, limit, no_view)
            except CfsmError as exc:
                if exc.kind not in NEXT_ON:
                    raise
                tried.append((name, exc.kind, exc.message))
                if get_backend(name).needs_automaton and exc.kind in AUTOMATON_FAILURES:
                    # building it again for the FSM view would wait as long (and for a
                    # fresh worker, the killed one's replacement)
                    no_view = f"the FSM view was not built: {name} could not ({exc.message})"
                continue
            res.seconds = time.perf_counter() - t0
            res.why = why_chosen(constraint.kind, name, [(n, m) for n, _, m in tried])
            return res
        raise CfsmError(*none_enforces(constraint.kind, tried))

    def _native_runner(self, clock: Clock, full: bool):
        """What a backend that compiles in a worker calls: (name, constraint, dfa) ->
        payload, within what `clock` has left when the job starts (the wait for a worker
        and its setup excluded, for the automaton after it too). A payload is shared by the
        constraints with the same `native_key` (a time limit hit with less than the `full`
        budget is not). None without workers."""
        if self._worker is None:
            return None
        pool, ctx = self._worker, self.ctx

        def run(name: str, constraint: Constraint, dfa: CharDFA | None) -> bytes | None:
            def make() -> bytes | None:
                self.native_compiles += 1
                return pool.compile_native(name, ctx, constraint, dfa, clock)

            try:
                what = get_backend(name).native_key(constraint)
            except CfsmError:
                what = None  # the compile itself names what is wrong
            if what is None:
                return make()
            # an automaton built first may have used part of the budget
            short = not full or clock.left() < 0.9 * self.timeout_s
            return self._once(
                ("native", name, what, ctx.fingerprint),
                make,
                forget=lambda exc: short and getattr(exc, "kind", "") == "compile_timeout",
            )

        return run

    def has(self, constraint: Constraint, backend: str) -> bool:
        """A compiled result is cached for this constraint and backend (getting it
        compiles nothing). Does not count as a use of the entry."""
        return _succeeded(self.lru.peek(self.key(constraint, backend)))

    def submit(self, constraint: Constraint, backend: str) -> cf.Future:
        if backend != AUTO:
            get_backend(backend)  # unknown names fail here, synchronously
        k = self.key(constraint, backend)
        with self._lock:
            fut = self._cached(k)
            if fut is not None:
                self.hits += 1
                return fut
            refused = self._refused_at_once(constraint)
            if refused is not None:  # cached as a compile's failure is, no compile started
                self.lru.put(k, refused)
                return refused
            self.misses += 1
            fut = self._threads.submit(self._compile, constraint, backend)
            self.lru.put(k, fut)
            self._watch(k, fut)
            return fut

    @staticmethod
    def _refused_at_once(constraint: Constraint) -> cf.Future | None:
        """A failed future for a regex no backend reads: every backend reads a regex in its
        normalized form, so a construct none of them holds (a look-around, a parse error)
        is refused before any compile starts (xgrammar's worker setup took 3.3 s to say so
        for `(?=a)a`)."""
        if constraint.kind != "regex":
            return None
        try:
            normalize_regex(constraint.text)
        except CfsmError as exc:
            fut: cf.Future = cf.Future()
            fut.set_exception(exc)
            fut.cfsm_failed_at = time.monotonic()
            return fut
        return None

    def get(
        self, constraint: Constraint, backend: str, timeout_s: float | None = None
    ) -> CompileResult:
        fut = self.submit(constraint, backend)
        # The workers end every job at its limit; without them the margin covers a library
        # that compiles in this process and returns late. With them, a compile may also wait
        # for a worker that is still being set up (a just-started server, ~10 s here).
        wait = self.timeout_s + 2 + (240.0 if self._worker is not None else 0.0)
        try:
            return fut.result(timeout=timeout_s if timeout_s is not None else wait)
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

    def wait_ready(self, timeout_s: float = 300.0) -> bool:
        """Block until the workers asked to warm up are set up (at once without workers or
        without warm-up): a benchmark's first compile then pays what a served one pays."""
        return self._worker is None or self._worker.ready.wait(timeout_s)

    def close(self) -> None:
        if self._worker is not None:
            self._worker.close()
        if self._live is not None:
            self._live.close()
        self._threads.shutdown(wait=False, cancel_futures=True)
