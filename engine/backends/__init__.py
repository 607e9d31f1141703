"""Grammar backends: one interface (base.py), four adapters, chosen by name. What a
backend can do is read from its class (`kinds`, `needs_automaton`, `grammar_syntax`), never
from its name."""

from __future__ import annotations

from collections.abc import Callable, Mapping

from ..errors import CfsmError
from ..live_names import LiveNames
from .base import CompiledConstraint, GrammarBackend, Matcher, TokenizerContext
from .choose import AUTO
from .fsm import FsmBackend
from .llguidance_backend import LlguidanceBackend
from .outlines_backend import OutlinesBackend
from .xgrammar_backend import XgrammarBackend

_REGISTRY: dict[str, type[GrammarBackend]] = {
    b.name: b for b in (FsmBackend, OutlinesBackend, XgrammarBackend, LlguidanceBackend)
}


def _names(keep: Callable[[type[GrammarBackend]], bool], first: tuple = ()) -> LiveNames:
    """The registered backends a class attribute selects, read from the registry each time
    (a backend registered later is in every list: the CLI's, the page's, the tests')."""
    return LiveNames(lambda: (*first, *(n for n, b in _REGISTRY.items() if keep(b))))


class _Syntaxes(Mapping[str, str]):
    """Backend name -> the grammar syntax it reads, for the backends that take grammars."""

    def _map(self) -> dict[str, str]:
        return {n: b.grammar_syntax for n, b in _REGISTRY.items() if b.grammar_syntax}

    def __getitem__(self, name: str) -> str:
        return self._map()[name]

    def __iter__(self):
        return iter(self._map())

    def __len__(self) -> int:
        return len(self._map())


BACKENDS = _names(lambda b: True)  # the backends themselves (tests and benchmarks loop over them)
BACKEND_CHOICES = _names(lambda b: True, (AUTO,))  # what a user may ask for (`auto`: choose.py)
DEFAULT_BACKEND = AUTO
REGEX_BACKENDS = BACKENDS
# Those that compile their own grammar from the constraint (no character automaton)
NATIVE_BACKENDS = _names(lambda b: not b.needs_automaton)
# Those whose library compiles in a killable worker process (the one isolation flag)
WORKER_BACKENDS = _names(lambda b: b.compiles_in_worker)
# Backends that take grammars, and the syntax each reads.
GRAMMAR_SYNTAX = _Syntaxes()


def register_backend(cls: type[GrammarBackend]) -> None:
    """Add a backend (its `name` must be new): the CLI, the page, the API, the differential
    tests and the benchmarks list it from then on. `auto` keeps its own order (choose.py)."""
    if not cls.name or cls.name in _REGISTRY or cls.name == AUTO:
        raise ValueError(f"a backend needs a new name, not {cls.name!r}")
    _REGISTRY[cls.name] = cls


def unregister_backend(name: str) -> None:
    """Remove a backend registered with `register_backend` (tests clean up with it)."""
    _REGISTRY.pop(name, None)


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
    "register_backend",
    "unregister_backend",
]
