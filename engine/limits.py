"""Limits that keep one request from taking the process down. Each has a sane default
and can be changed with an environment variable (the CLI also has flags for some)."""

from __future__ import annotations

import os


def _int(name: str, default: int) -> int:
    try:
        return int(os.environ.get(name, default))
    except ValueError:
        return default


def _float(name: str, default: float) -> float:
    try:
        return float(os.environ.get(name, default))
    except ValueError:
        return default


MAX_STATES = _int("CFSM_MAX_STATES", 10_000)  # DFA states
# A /v1 request (or /tokenize) sent while `cfsm serve` still loads its model waits this long
# for it (the embedded model: about 20 s on 2 cores), then gets a 503 `model_loading`
LOAD_WAIT_S = _float("CFSM_LOAD_WAIT_S", 300.0)
COMPILE_TIMEOUT_S = _float("CFSM_COMPILE_TIMEOUT_S", 20.0)  # a whole compile, automaton included
MAX_PROMPT_CHARS = _int("CFSM_MAX_PROMPT_CHARS", 20_000)
MAX_NEW_TOKENS = _int("CFSM_MAX_NEW_TOKENS", 2048)
MAX_REGEX_CHARS = _int("CFSM_MAX_REGEX_CHARS", 20_000)
# real schemas reach 1 MB (JSONSchemaBench's Kubernetes and Github_ultra ones); the work
# done with them is bounded while it builds (schema/budget.py, the compile workers)
MAX_SCHEMA_CHARS = _int("CFSM_MAX_SCHEMA_CHARS", 1_000_000)
# the regex a schema lowers to, checked while it is built (engine/schema/budget.py)
MAX_SCHEMA_REGEX_CHARS = _int("CFSM_MAX_SCHEMA_REGEX_CHARS", 2_000_000)
MAX_GRAMMAR_CHARS = _int("CFSM_MAX_GRAMMAR_CHARS", 100_000)

# Every cache of compiled constraints, token indexes, device masks and automata shares one
# budget (a least-recently-used map bounded by bytes); a DFA worker process is recycled
# when its resident memory passes CFSM_WORKER_RSS_MB.
CACHE_BUDGET_MB = _int("CFSM_CACHE_BUDGET_MB", 768)
WORKER_RSS_MB = _int("CFSM_WORKER_RSS_MB", 600)
# A compile job (automaton, outlines-core Index, xgrammar, llguidance) is killed when its
# worker's resident memory passes this (`compile_memory`); two workers run at a time, and
# the live check's (below, automata only) is capped alike, so the server and its children
# stay under about its own size + 3 x this.
COMPILE_MEMORY_MB = _int("CFSM_COMPILE_MEMORY_MB", 768)
# A check while typing builds a regex's automaton in a third worker of its own for at most
# this long (its start-up not counted); past it, the page says Run will try with the full
# compile limit. Its memory is capped like a compile's.
LIVE_CHECK_S = _float("CFSM_LIVE_CHECK_S", 1.5)
# After a native backend (xgrammar, llguidance) compiled, its automaton is built only for
# the page's FSM view: a schema whose automaton takes longer goes without the view rather
# than hold the request (a 0.2 s llguidance compile used to wait 15 s for it)
VIEW_LIMIT_S = _float("CFSM_VIEW_LIMIT_S", 3.0)
# fsm indexes its automaton's states at compile, breadth first from the start, for at most
# this long and this many bytes of allowed ids; the rest are indexed when decoding first
# reaches them (0: all lazy). Over JSONSchemaBench's sample every state of a schema took
# p90 73 ms, p99 0.6 s, at most 3.6 s (docs/backends.md): about 1 schema in 70
# stops at a limit.
INDEX_AHEAD_S = _float("CFSM_INDEX_AHEAD_S", 1.0)
INDEX_AHEAD_MB = _int("CFSM_INDEX_AHEAD_MB", 48)
# `auto`'s time for each backend it tries before the last one (the last has the whole
# compile limit): measured over JSONSchemaBench's sample, fsm compiled everything it could
# in at most 4.4 s (docs/backends.md)
AUTO_FIRST_S = _float("CFSM_AUTO_FIRST_S", 8.0)
