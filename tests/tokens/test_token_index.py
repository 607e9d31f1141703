import numpy as np
import pytest
import torch

from engine.regex.dfa import build_char_dfa
from engine.tokens.index import TokenIndex


def brute_allowed(dfa, vocab, state: int) -> set[int]:
    """Reference: walk every text token's characters one by one."""
    out = set()
    for tid, b in enumerate(vocab.token_bytes):
        if not b:
            continue
        try:
            text = b.decode("utf-8")
        except UnicodeDecodeError:
            continue
        if dfa.walk(text, state) is not None:
            out.add(tid)
    if state in dfa.finals:
        out.add(vocab.eos_token_id)
    return out


@pytest.mark.parametrize(
    "pattern",
    [r"(apple|apricot) pie [0-9]{1,3}", r'\{"id": [0-9]+, "ok": (true|false)\}', r"[a-z ]{0,8}\."],
)
def test_vectorized_index_matches_brute_force(ctx, pattern):
    dfa = build_char_dfa(pattern)
    idx = TokenIndex(dfa, ctx.vocab)
    for s in range(dfa.num_states):
        got = set(idx.allowed_ids(s).tolist())
        want = brute_allowed(dfa, ctx.vocab, s)
        # byte-level tokens that are not valid UTF-8 can only be allowed where a
        # non-ASCII character is; these patterns are ASCII
        assert got == want, (pattern, s, sorted(got ^ want)[:10])


WIDE = [
    r'"[^"\\]*"',
    r'\{"a":"([^"\\]|\\.)*","b":"[^"]{0,3}x[^"]*"\}',
    r"[^<]*<(b|i)>[^<]*</(b|i)>",
    r"([a-z ]|[0-9])*;",
    r'"[0-9a-f]{40}"',
    r'\{"name":"[^"\\]{0,63}","n":[0-9]{1,9}\}',
]


@pytest.mark.parametrize("pattern", WIDE)
def test_states_with_a_wide_self_loop_allow_what_a_walk_from_the_first_character_does(ctx, pattern):
    """A string's content (most tokens start in its self-loop) goes through the shared
    loop split, and tokens entering a loop or a counted run (hex digits, a maxLength)
    through the shared runs: the same ids as each token walked character by character,
    irregular (partial-character) tokens included, for every state."""
    dfa = build_char_dfa(pattern)
    idx = TokenIndex(dfa, ctx.vocab)
    walked = TokenIndex(dfa, ctx.vocab)
    walked.WIDE_LOOP = 10**9  # every state walked from the first character
    wide = 0
    for s in range(dfa.num_states):
        loops = [k for k, t in dfa.trans[s].items() if t == s]
        wide += sum(int(idx._first_start[k + 1] - idx._first_start[k]) for k in loops) >= 2048
        got = idx.allowed_ids(s)
        assert np.all(np.diff(got) > 0)  # sorted, no repeats
        assert got.tolist() == walked.allowed_ids(s).tolist(), (pattern, s)
        regular = brute_allowed(dfa, ctx.vocab, s)
        irregular = {
            t
            for t, b in enumerate(ctx.vocab.token_bytes)
            if b and _not_utf8(b) and idx._walk(s, b"", b) is not None
        }
        assert set(got.tolist()) == regular | irregular, (pattern, s)
    assert wide >= 1 or any(c is not None and c[0][0] != c[0][-1] for c in idx._chains.values())


def test_partial_utf8_tokens_walk_through_pending_states(ctx, tokenizer):
    dfa = build_char_dfa(r"[\u4e00-\u9fff]{2,5}!")
    idx = TokenIndex(dfa, ctx.vocab)
    text = "中文好不好!"
    ids = tokenizer.encode(text, add_special_tokens=False)
    # at least one token of this text ends inside a character
    assert any(_not_utf8(ctx.vocab.token_bytes[t]) for t in ids)
    s = idx.initial
    for t in ids:
        assert t in set(idx.allowed_ids(s).tolist())
        s = idx.next_state(s, t)
        assert s is not None
    assert idx.is_final(s)
    assert ctx.eos_token_id in set(idx.allowed_ids(s).tolist())
    # a lone continuation byte is never allowed at the start
    cont = [
        t
        for t in range(ctx.vocab.size)
        if ctx.vocab.token_bytes[t] and 0x80 <= ctx.vocab.token_bytes[t][0] <= 0xBF
    ]
    assert not set(cont) & set(idx.allowed_ids(idx.initial).tolist())


def _not_utf8(b: bytes) -> bool:
    try:
        b.decode("utf-8")
        return False
    except UnicodeDecodeError:
        return True


def test_masks_are_bitmask_rows_cached_per_state_on_the_device(ctx):
    """A step stacks the state's cached row as it is: the same tensor each visit, an
    eighth of a boolean mask, holding exactly the state's allowed ids."""
    dfa = build_char_dfa(r"(yes|no)")
    idx = TokenIndex(dfa, ctx.vocab)
    r1 = idx.bitmask(idx.initial, "cpu")
    assert r1 is idx.bitmask(idx.initial, "cpu")
    assert r1.dtype == torch.int32 and r1.numel() * 32 < ctx.vocab.size + 32
    m = idx.mask(idx.initial, "cpu")
    assert m.dtype == torch.bool and m.numel() == ctx.vocab.size
    assert torch.nonzero(m).flatten().tolist() == idx.allowed_ids(idx.initial).tolist()


def test_fsm_indexes_states_ahead_breadth_first_within_its_byte_budget(ctx, character_regex):
    """The fsm compile indexes every state ahead (so no decode step waits on a first visit),
    with what a lazy index computes; a byte budget stops it after the states nearest the
    start, and the rest stay lazy."""
    from engine.backends import get_backend
    from engine.constraint import Constraint

    c = Constraint("regex", character_regex)
    index = get_backend("fsm").compile(c, ctx).index
    dfa = index.dfa
    assert index.stats()["char_states_indexed"] == dfa.num_states
    lazy = TokenIndex(dfa, ctx.vocab)
    for s in range(0, dfa.num_states, 5):
        assert np.array_equal(index._allowed[s], lazy.allowed_ids(s))
    capped = TokenIndex(dfa, ctx.vocab)
    first = capped.allowed_ids(dfa.initial).nbytes
    assert capped.index_ahead(60.0, first) == 2  # the start, then the state it leads to
    assert dfa.initial in capped._allowed
    assert set(capped._allowed) <= {dfa.initial, *dfa.trans[dfa.initial].values()}
    assert capped.index_ahead(0.0, 1 << 30) == 2  # no time: nothing more


def test_the_index_is_lazy_and_states_computed_alone_equal_a_fresh_index(ctx, character_regex):
    """Compiling indexes no state; a state is computed when decoding asks for it, and
    the result does not depend on which states were asked for before."""
    dfa = build_char_dfa(character_regex)
    a = TokenIndex(dfa, ctx.vocab)
    assert a.stats()["char_states_indexed"] == 0 and a.stats()["char_states"] == dfa.num_states
    last = dfa.num_states - 1
    got = a.allowed_ids(last)
    assert a.stats()["char_states_indexed"] == 1
    b = TokenIndex(dfa, ctx.vocab)
    for s in range(dfa.num_states):
        b.allowed_ids(s)
    assert np.array_equal(got, b.allowed_ids(last))
    for s in range(0, dfa.num_states, 7):
        assert np.array_equal(a.allowed_ids(s), b.allowed_ids(s))
