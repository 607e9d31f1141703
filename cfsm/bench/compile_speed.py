"""Compile times of one regex with empty caches, side by side in one run: the peers
benchmark's compile table (outlines-core, the lab's fsm backend three ways, xgrammar,
llguidance, the engine's cache)."""

from __future__ import annotations

import statistics
import time

from engine.backends import get_backend
from engine.backends.outlines_backend import token_groups
from engine.constraint import Constraint
from engine.lazy import lazy_module
from engine.regex.normalize import normalize_regex
from engine.tokens.index import vocab_tokens

xgr = lazy_module("xgrammar")
llguidance = lazy_module("llguidance")
llg_hf = lazy_module("llguidance.hf")
outlines_core = lazy_module("outlines_core")


def compile_speed(engine, regex: str, repeats: int = 3) -> dict:
    """Compile times on one regex with empty caches, side by side in one run (median of
    `repeats`; per-tokenizer setup such as outlines-core's Vocabulary is built once, apart;
    the libraries get the regex as the adapters hand it to them, normalized):
    outlines-core's Index, the default backend (fsm: DFA plus lazy token index), xgrammar,
    llguidance, and a cached compile through the engine."""

    ctx, c = engine.ctx, Constraint("regex", regex)
    regex = normalize_regex(
        regex
    )  # what every adapter hands its library (\w as the engine reads it)
    t = time.perf_counter()
    # without the adapter's end marker
    oc_vocab = outlines_core.Vocabulary(ctx.eos_token_id, token_groups(ctx))
    xgr_info = xgr.TokenizerInfo.from_huggingface(ctx.tokenizer, vocab_size=ctx.vocab_size)
    llg_tok = llg_hf.from_tokenizer(
        ctx.tokenizer, n_vocab=ctx.vocab_size, eos_token=ctx.eos_token_id
    )
    vocab_tokens(ctx.vocab)
    setup_s = time.perf_counter() - t

    def timed(fn) -> float:
        times = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t0)
        return statistics.median(times)

    lazy = get_backend("fsm")
    lazy.index_ahead_s = 0.0  # this instance only

    def every_state():
        index = lazy.compile(c, ctx).index
        for s in range(index.num_char_states):
            index.allowed_ids(s)

    res = {
        "outlines-core Index": timed(lambda: outlines_core.Index(regex, oc_vocab)),
        "fsm, lazy (states indexed as decoding reaches them)": timed(lambda: lazy.compile(c, ctx)),
        "fsm, every state indexed up front (what Index builds)": timed(every_state),
        "fsm, the default (states indexed ahead at compile, within a budget)": timed(
            lambda: get_backend("fsm").compile(c, ctx)
        ),
        "xgrammar": timed(
            lambda: xgr.GrammarCompiler(xgr_info, cache_enabled=False).compile_regex(regex)
        ),
        "llguidance": timed(
            lambda: llguidance.LLMatcher(llg_tok, llguidance.LLMatcher.grammar_from_regex(regex))
        ),
    }
    engine.compile(c, "fsm")
    res["fsm, cached (engine compile cache)"] = timed(lambda: engine.compile(c, "fsm"))
    base = res["outlines-core Index"]
    return {
        "regex_chars": len(regex),
        "setup_s": round(setup_s, 3),
        "seconds": {k: round(v, 5) for k, v in res.items()},
        "vs_outlines_core": {k: round(v / base, 3) for k, v in res.items()},
    }
