"""Token text made visible: whitespace glyphs, escaping for HTML."""

from __future__ import annotations

import html

GLYPHS = {" ": "\u2423", "\n": "\u21b5", "\t": "\u21e5", "\r": "\u240d"}


def visible(text: str) -> str:
    """Show whitespace as glyphs (a tokenizer-playground convention)."""
    return "".join(GLYPHS.get(ch, ch) for ch in text) or "\u2205"


def esc(text: str) -> str:
    return html.escape(text, quote=True)
