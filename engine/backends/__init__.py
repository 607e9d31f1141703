"""Grammar backends, chosen by name."""

from __future__ import annotations

from ..errors import CfsmError
from .base import CompiledConstraint, GrammarBackend, Matcher, TokenizerContext

BACKENDS = ("fsm", "outlines", "xgrammar", "llguidance")
REGEX_BACKENDS = BACKENDS


def get_backend(name: str) -> GrammarBackend:
    if name == "fsm":
        from .fsm import FsmBackend

        return FsmBackend()
    if name == "outlines":
        from .outlines_backend import OutlinesBackend

        return OutlinesBackend()
    if name == "xgrammar":
        from .xgrammar_backend import XgrammarBackend

        return XgrammarBackend()
    if name == "llguidance":
        from .llguidance_backend import LlguidanceBackend

        return LlguidanceBackend()
    raise CfsmError("unknown_backend", f"unknown backend {name!r}; choose one of {', '.join(BACKENDS)}")


__all__ = ["BACKENDS", "CompiledConstraint", "GrammarBackend", "Matcher", "TokenizerContext", "get_backend"]
