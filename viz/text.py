"""Token text made visible: whitespace glyphs, escaping for HTML."""

from __future__ import annotations

import html
import re

GLYPHS = {" ": "\u2423", "\n": "\u21b5", "\t": "\u21e5", "\r": "\u240d"}


# how the engine writes bytes that are not whole UTF-8 characters (`<E5 B8>`,
# engine/decoding/sequence.py:readable): kept as written, its spaces are not text
_BYTE_RUN = re.compile(r"(<[0-9A-F]{2}(?: [0-9A-F]{2})*>)")


def visible(text: str) -> str:
    """Show whitespace as glyphs (a tokenizer-playground convention); a byte run reads
    `<E5 B8>` in every panel, as on the token strip."""
    parts = _BYTE_RUN.split(text)
    out = [p if i % 2 else "".join(GLYPHS.get(ch, ch) for ch in p) for i, p in enumerate(parts)]
    return "".join(out) or "\u2205"


def esc(text: str) -> str:
    return html.escape(text, quote=True)
