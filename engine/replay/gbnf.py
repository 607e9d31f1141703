"""A regex as llama.cpp's GBNF (llama-server takes grammars, not regexes)."""

from __future__ import annotations

import re

from ..lazy import lazy_module

xgr = lazy_module("xgrammar")

RULE_NAME = re.compile(r"\broot(?:_\d+)+\b")
REPEAT_SPACE = re.compile(r"\{(\d+), ?(\d*)\}")


def regex_gbnf(regex: str) -> str:
    """A GBNF grammar for `regex` (already normalized), printed by xgrammar, in llama.cpp's
    spelling: rule names without underscores (`root_1` -> `root-1`; its printout splits
    literals into one-character strings, so no name can occur inside one) and repeat counts
    without the space (`{1, 16}` -> `{1,16}`)."""
    text = RULE_NAME.sub(lambda m: m.group(0).replace("_", "-"), str(xgr.Grammar.from_regex(regex)))
    return REPEAT_SPACE.sub(r"{\1,\2}", text)
