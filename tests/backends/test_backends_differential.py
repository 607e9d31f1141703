"""Every regex-capable backend must allow exactly the same tokens at every step.

Documented, principled differences (tested explicitly below):
- llguidance forces the canonical tokenization of forced text: where the next characters
  are forced, it drops tokens that cover only part of them when a longer token fits.
  Its sets are therefore subsets of ours, differing only at states with a jump string.
- Special tokens (empty text) are removed from every backend's mask except EOS.
"""

import random

import numpy as np
import pytest
import torch

from engine.backends import BACKENDS, get_backend
from engine.constraint import Constraint
from engine.tokens.bitmask import unpack

CASES = [
    (r"(apple|apricot|banana) pie [0-9]+", "apricot pie 12"),
    (r"[\u4e00-\u9fff]{2,5}!", "中文好不好!"),
    (r"(19|20)[0-9]{2}-(0[1-9]|1[0-2])-(0[1-9]|[12][0-9]|3[01])", "2024-02-29"),
    (
        r"((25[0-5]|2[0-4][0-9]|1?[0-9]?[0-9])\.){3}(25[0-5]|2[0-4][0-9]|1?[0-9]?[0-9])",
        "192.168.1.254",
    ),
]


def _matchers(ctx, pattern):
    c = Constraint("regex", pattern)
    return {b: get_backend(b).compile(c, ctx).matcher() for b in BACKENDS}


def _compare(ms, vocab):
    """Every backend against fsm: the exact ones token for token, the others (llguidance)
    subsets that differ only where text is forced."""
    ref = set(ms["fsm"].allowed_ids().tolist())
    for b, m in ms.items():
        got = set(m.allowed_ids().tolist())
        if get_backend(b).exact_masks:
            assert got == ref, (b, sorted(got ^ ref)[:10])
            continue
        assert got <= ref, (b, sorted(got - ref)[:10])
        if got != ref:
            assert ms["fsm"].jump_forward() != "", f"{b} may only differ where text is forced"
    # the rows a batch's step stacks: each backend's bitmask holds its allowed set, and the
    # exact backends' rows (a library's own, fsm's packed) are the same bits
    v = vocab.size
    fsm_row = ms["fsm"].bitmask("cpu", v)
    for b, m in ms.items():
        row = m.bitmask("cpu", v)
        assert row.dtype == torch.int32 and row.shape == ((v + 31) // 32,), b
        assert np.flatnonzero(unpack(row, v).numpy()).tolist() == sorted(m.allowed_ids()), b
        assert m.allowed_count() == len(m.allowed_ids()), b
        if get_backend(b).exact_masks:
            assert torch.equal(row, fsm_row), b
    # EOS agreement
    for b, m in ms.items():
        assert (vocab.eos_token_id in set(m.allowed_ids().tolist())) == m.is_final(), b
    return ref


@pytest.mark.parametrize("pattern, text", CASES + [("CHARACTER", None)])
def test_same_allowed_sets_along_real_tokenizations(ctx, tokenizer, character_regex, pattern, text):
    if pattern == "CHARACTER":
        pattern = character_regex
        text = (
            '{\n    "name": "Harry Potter",\n    "house": "Gryffindor",\n    "blood status": '
            '"Half-blood",\n    "occupation": "student",\n    "wand": {\n        "wood": '
            '"Holly",\n        "core": "Phoenix feather",\n        "length": 11.0\n    },\n    '
            '"alive": "Alive",\n    "patronus": "Stag",\n    "bogart": "Dementor"\n}'
        )
    ms = _matchers(ctx, pattern)
    ids = tokenizer.encode(text, add_special_tokens=False)
    for t in ids:
        _compare(ms, ctx.vocab)
        jfs = {b: m.jump_forward() for b, m in ms.items()}
        assert len(set(jfs.values())) == 1, jfs
        for b, m in ms.items():
            assert m.accept_token(t), b
    for b, m in ms.items():
        assert m.is_final(), b


@pytest.mark.parametrize("pattern", [c[0] for c in CASES])
def test_same_allowed_sets_along_random_walks(ctx, pattern):
    ms = _matchers(ctx, pattern)
    random_walk(ms, ctx.vocab, random.Random(1234))


def random_walk(ms: dict, vocab, rng: random.Random, steps: int = 12) -> None:
    """Walk tokens fsm allows, comparing every backend's set at each step."""
    for _ in range(steps):
        ref = _compare(ms, vocab)
        choices = sorted(ref - {vocab.eos_token_id})
        if not choices:
            break
        t = rng.choice(choices)
        for b in [b for b, m in ms.items() if t not in set(m.allowed_ids().tolist())]:
            # a non-canonical forced token (the documented difference of a backend whose
            # masks are not exact): it cannot follow this walk, the others go on
            assert not get_backend(b).exact_masks, b
            del ms[b]
        for b, m in ms.items():
            assert m.accept_token(t), b


def test_rollback_restores_the_same_mask(ctx, tokenizer):
    ms = _matchers(ctx, CASES[0][0])
    ids = tokenizer.encode("apricot pie 12", add_special_tokens=False)
    for b, m in ms.items():
        before = m.allowed_ids().copy()
        for t in ids[:2]:
            assert m.accept_token(t)
        m.rollback(2)
        assert (m.allowed_ids() == before).all(), b


def test_llguidance_difference_is_the_canonical_forced_tokenization(ctx):
    ms = _matchers(ctx, r'\{"bogart": "[a-z]+"\}')
    fsm = set(ms["fsm"].allowed_ids().tolist())
    llg = set(ms["llguidance"].allowed_ids().tolist())
    assert llg < fsm
    dropped = {ctx.vocab.token_bytes[t] for t in fsm - llg}
    assert b"{" in dropped  # a prefix-only token of the forced text


def test_outlines_takes_the_longer_alternative(ctx):
    """Found by the fuzzer: for `(a|ab)` outlines-core 0.2.x alone drops "ab" (it drops
    every token leaving an accepting state for a non-accepting one). The adapter's end
    marker works around it: every backend, like Python's `re.fullmatch`, allows "ab"."""
    import re

    assert re.fullmatch("(a|ab)", "ab")
    ab = [t for t in range(ctx.vocab.size) if ctx.vocab.token_bytes[t] == b"ab"][0]
    for rx in ("(a|ab)", "(ab|a)"):
        ms = _matchers(ctx, rx)
        for b in BACKENDS:
            assert ab in set(ms[b].allowed_ids().tolist()), (rx, b)


@pytest.mark.parametrize("backend", BACKENDS)
def test_every_matcher_keeps_the_interface_contract(ctx, tokenizer, backend):
    """accept_token refuses without moving; rollback undoes exactly what was accepted and
    refuses to go past the start, leaving the state as it was (base.Matcher's contract)."""
    m = get_backend(backend).compile(Constraint("regex", "ab[0-9]+"), ctx).matcher()
    a, z = (tokenizer.encode(t, add_special_tokens=False) for t in ("a", "z"))
    start = m.allowed_ids().tolist()
    assert not m.accept_token(z[0])  # refused: nothing moves
    assert m.allowed_ids().tolist() == start
    assert m.accept_token(a[0])
    after_a = m.allowed_ids().tolist()
    assert after_a != start
    with pytest.raises(ValueError):
        m.rollback(2)
    assert m.allowed_ids().tolist() == after_a  # the failed rollback changed nothing
    m.rollback(0)
    assert m.allowed_ids().tolist() == after_a
    m.rollback(1)
    assert m.allowed_ids().tolist() == start
    assert m.accept_token(a[0]) and m.allowed_ids().tolist() == after_a
