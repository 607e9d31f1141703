"""How each native library spells this lab's JSON settings (the whitespace policy, JSON
Schema's own reading), read by its adapter and by its trigger grammars alike."""

from __future__ import annotations

from ..constraint import Constraint


def xgrammar_json_options(constraint: Constraint) -> dict:
    """xgrammar's JSON options for our whitespace policy; objects closed unless JSON
    Schema's own reading is asked for."""
    ws = constraint.ws
    return {
        "any_whitespace": ws.flexible,
        "separators": None if ws.flexible else ws.separators,
        "max_whitespace_cnt": 1 if ws.flexible else None,
        "strict_mode": not constraint.spec,
    }


def llguidance_json_overrides(constraint: Constraint) -> dict:
    """llguidance's JSON options for our whitespace policy."""
    ws = constraint.ws
    opts = {"item_separator": ws.item, "key_separator": ws.key, "whitespace_flexible": ws.flexible}
    if ws.flexible:
        opts["whitespace_pattern"] = ws.pattern
    return opts
