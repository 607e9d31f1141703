"""Tokenizing the model's output as it stands inside a longer text, for every tokenizer
family transformers ships for causal LMs.

Jump-forward re-tokenizes the output alone (never merged into the prompt's tokens). A
SentencePiece-style tokenizer prepends a space to the first piece of every encode call
(a `Prepend("▁")` normalizer in older fast tokenizers, `Metaspace(prepend_scheme=...)` in
newer ones; GPT-2's `ByteLevel(add_prefix_space=True)` does the same), so encoding the
output on its own would spell ` output`, not `output`. The encoder here is a copy of the
tokenizer with that prefix switched off, so the tokens it returns spell exactly the text.
It also describes the tokenizer (family, byte fallback, prefix space) for the model card
and the doctor."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass

from ..lazy import lazy_module
from .vocab import TokenVocab

tokenizers = lazy_module("tokenizers")


@dataclass(frozen=True)
class TokenizerTraits:
    """What a user's tokenizer is, in the terms jump-forward cares about."""

    family: str  # byte-level BPE | SentencePiece BPE | Unigram | WordPiece | other
    byte_fallback: bool  # <0x00>..<0xFF> spell what the merges cannot
    prefix_space: bool  # a space is prepended to the first piece of each encode call
    prefix_space_by: str | None  # the component that prepends it (switched off for outputs)
    normalizes: bool  # a normalizer that may change text (NFKC, lowercase, ...)
    added_tokens: int  # added (chat-marker) tokens the tokenizer matches in text

    def to_json(self) -> dict:
        return asdict(self)


def _walk(node, fn):
    """Apply fn to a component and to every member of a Sequence; fn returns the
    replacement (None drops it)."""
    if not isinstance(node, dict):
        return node
    if node.get("type") == "Sequence":
        key = "normalizers" if "normalizers" in node else "pretokenizers"
        members = [m for m in (_walk(m, fn) for m in node.get(key) or []) if m is not None]
        return {**node, key: members}
    return fn(node)


class ContinuationEncoder:
    """`encode(text)`: token ids that spell `text` the way the tokenizer splits it in the
    middle of a longer text (no prefix space, no BOS)."""

    def __init__(self, tokenizer, vocab: TokenVocab) -> None:
        self.tokenizer = tokenizer
        self.vocab = vocab
        self._fast = None
        backend = getattr(tokenizer, "backend_tokenizer", None)
        data = json.loads(backend.to_str()) if backend is not None else {}
        self.traits, patched = self._describe(data)
        if patched is not None:
            self._fast = tokenizers.Tokenizer.from_str(json.dumps(patched))

    def _describe(self, data: dict) -> tuple[TokenizerTraits, dict | None]:
        by: list[str] = []
        normalizes = [False]

        def norm(n):
            if n.get("type") == "Prepend":
                by.append("Prepend normalizer")
                return None
            if n.get("type") not in ("Replace", "Strip"):
                normalizes[0] = True
            return n

        def pre(n):
            t = n.get("type")
            if t == "Metaspace" and (
                n.get("prepend_scheme") not in (None, "never") or n.get("add_prefix_space")
            ):
                by.append(f"Metaspace(prepend_scheme={n.get('prepend_scheme', 'always')!r})")
                n = {**n, "prepend_scheme": "never"}
                n.pop("add_prefix_space", None)
            elif t == "ByteLevel" and n.get("add_prefix_space"):
                by.append("ByteLevel(add_prefix_space=True)")
                n = {**n, "add_prefix_space": False}
            return n

        patched = dict(data)
        if data.get("normalizer"):
            patched["normalizer"] = _walk(data["normalizer"], norm)
        if data.get("pre_tokenizer"):
            patched["pre_tokenizer"] = _walk(data["pre_tokenizer"], pre)
        model = data.get("model") or {}
        byte_level = "ByteLevel" in json.dumps(data.get("pre_tokenizer")) + json.dumps(
            data.get("decoder")
        )
        kind = model.get("type", "")
        family = {
            "BPE": "byte-level BPE" if byte_level else "SentencePiece BPE",
            "Unigram": "Unigram",
            "WordPiece": "WordPiece",
        }.get(kind, "other")
        traits = TokenizerTraits(
            family=family,
            byte_fallback=bool(model.get("byte_fallback")),
            prefix_space=bool(by),
            prefix_space_by=", ".join(by) or None,
            normalizes=normalizes[0],
            added_tokens=len(data.get("added_tokens") or []),
        )
        if not by:
            return traits, None
        patched["post_processor"] = None  # no BOS: outputs are continuations
        return traits, patched

    def encode(self, text: str, add_special_tokens: bool = False) -> list[int]:
        """Never adds special tokens (the keyword is there so callers that take a
        tokenizer can take this encoder)."""
        if self._fast is not None:
            return list(self._fast.encode(text, add_special_tokens=False).ids)
        return list(self.tokenizer.encode(text, add_special_tokens=False))

    def spell(self, ids: list[int]) -> bytes:
        tb = self.vocab.token_bytes
        return b"".join(tb[t] or b"" for t in ids)

    def exact(self, text: str) -> tuple[list[int] | None, str | None]:
        """(ids, None) when the ids spell exactly `text`, else (None, why)."""
        ids = self.encode(text)
        want = text.encode("utf-8")
        got = self.spell(ids)
        if got == want:
            return ids, None
        tb = self.vocab.token_bytes
        if any(tb[t] is None for t in ids if t < len(tb)):
            return None, (
                "the tokenizer writes a special or unknown token for this text (a character its "
                "vocabulary cannot spell, or a chat marker)"
            )
        if self.traits.normalizes:
            return (
                None,
                "the tokenizer's normalizer changes this text, so its tokens do not spell it back",
            )
        return None, f"the tokenizer's tokens spell {got[:40]!r}, not {want[:40]!r}"
