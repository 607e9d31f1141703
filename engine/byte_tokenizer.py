"""A byte-level tokenizer with one token per byte (plus EOS), built in memory: used where
a verdict must not depend on a model's merges (the conformance benchmark walks every
instance byte by byte through each backend) and by unit tests that need no model files."""

from __future__ import annotations

import functools

EOS = "<|eos|>"


@functools.lru_cache(maxsize=1)
def byte_tokenizer():
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    alphabet = pre_tokenizers.ByteLevel.alphabet()
    table = _byte_chars()
    vocab = {table[b]: b for b in range(256)}
    assert set(vocab) == set(alphabet)
    vocab[EOS] = 256
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens([EOS])
    return PreTrainedTokenizerFast(tokenizer_object=tok, eos_token=EOS)


def _byte_chars() -> dict[int, str]:
    """GPT-2's printable stand-in character for each byte."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {b: chr(c) for b, c in zip(bs, cs, strict=True)}
