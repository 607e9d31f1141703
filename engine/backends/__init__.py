"""Grammar backends: one interface (base.py), four adapters, chosen by name. What a
backend can do is read from its class (`kinds`, `needs_automaton`, `grammar_syntax`), never
from its name."""

from __future__ import annotations

from ..errors import CfsmError
from .base import CompiledConstraint, GrammarBackend, Matcher, TokenizerContext
from .choose import AUTO
from .fsm import FsmBackend
from .llguidance_backend import LlguidanceBackend
from .outlines_backend import OutlinesBackend
from .xgrammar_backend import XgrammarBackend

_REGISTRY: dict[str, type[GrammarBackend]] = {
    b.name: b for b in (FsmBackend, OutlinesBackend, XgrammarBackend, LlguidanceBackend)
}
BACKENDS = tuple(_REGISTRY)  # the backends themselves (tests and benchmarks loop over them)
BACKEND_CHOICES = (AUTO, *BACKENDS)  # what a user may ask for: `auto` chooses (choose.py)
DEFAULT_BACKEND = AUTO
REGEX_BACKENDS = BACKENDS
# Those that compile their own grammar from the constraint (no character automaton)
NATIVE_BACKENDS = tuple(n for n, b in _REGISTRY.items() if not b.needs_automaton)
# Those whose library compiles in a killable worker process (the one isolation flag)
WORKER_BACKENDS = tuple(n for n, b in _REGISTRY.items() if b.compiles_in_worker)
# Backends that take grammars, and the syntax each reads.
GRAMMAR_SYNTAX = {n: b.grammar_syntax for n, b in _REGISTRY.items() if b.grammar_syntax}


def get_backend(name: str) -> GrammarBackend:
    cls = _REGISTRY.get(name)
    if cls is None:
        raise CfsmError(
            "unknown_backend", f"unknown backend {name!r}; choose one of {', '.join(BACKENDS)}"
        )
    return cls()


def check_grammar(text: str, backend: str) -> None:
    """Parse a grammar the way `backend` will; CfsmError when it does not parse or when the
    backend takes no grammars (the message names the ones that do)."""
    if backend not in GRAMMAR_SYNTAX:
        get_backend(backend)  # an unknown name says so
        choices = " or ".join(f"{n} ({s})" for n, s in GRAMMAR_SYNTAX.items())
        raise CfsmError(
            "unsupported_feature", f"backend {backend!r} does not take grammars: choose {choices}"
        )
    get_backend(backend).check_grammar(text)


__all__ = [
    "AUTO",
    "BACKENDS",
    "BACKEND_CHOICES",
    "DEFAULT_BACKEND",
    "GRAMMAR_SYNTAX",
    "NATIVE_BACKENDS",
    "WORKER_BACKENDS",
    "CompiledConstraint",
    "GrammarBackend",
    "Matcher",
    "TokenizerContext",
    "check_grammar",
    "get_backend",
]
