"""`auto`: the backend that can enforce the constraint, chosen for the user. A regex or a
schema goes to fsm (the automaton the lab draws and jumps over) when it compiles there
within its limits, else to the first native backend that enforces every keyword it uses
(each backend's audit refuses what it would let through); a grammar goes to the backend
whose syntax it is written in. Refusals that no backend can do better on (a regex that
does not parse, an invalid or unsatisfiable schema) are answered at once."""

from __future__ import annotations

import re

AUTO = "auto"

# the order tried, by constraint kind
ORDER = {
    "regex": ("fsm", "llguidance", "xgrammar"),
    "schema": ("fsm", "llguidance", "xgrammar"),
    "grammar": ("xgrammar", "llguidance"),
}
# a failure that another backend may not have: try the next one
NEXT_ON = frozenset(
    {
        "unsupported_feature",
        "state_explosion",
        "compile_timeout",
        "compile_memory",
        "compile_failed",
        "input_too_large",
        "invalid_grammar",
    }
)
LENIENT_HOW = (
    "to compile it unenforced, tick Lenient on the page, pass --lenient to the CLI, or send "
    '"lenient": true to /v1'
)


def why_chosen(kind: str, chosen: str, tried: list[tuple[str, str]]) -> str:
    """One line for the trace, the CLI and the page: the backend and why."""
    if not tried:
        return f"{chosen}: the first choice for a {kind}"
    passed = "; ".join(f"{name} refused it ({msg})" for name, msg in tried)
    return f"{chosen}, because {passed}"


def none_enforces(kind: str, tried: list[tuple[str, str, str]]) -> tuple[str, str]:
    """(error kind, message) when every backend refused: each one's reason, and how to
    compile leniently where a keyword is what stopped them."""
    if len({(k, msg) for _, k, msg in tried}) == 1:  # the same refusal everywhere (its size)
        return tried[0][1], tried[0][2]
    each = "; ".join(f"{name}: {_own(msg)}" for name, _, msg in tried)
    kinds = {k for _, k, _ in tried}
    lenient = f"; {LENIENT_HOW}" if "unsupported_feature" in kinds else ""
    err = "unsupported_feature" if "unsupported_feature" in kinds else tried[-1][1]
    if kind == "grammar" and kinds == {"invalid_grammar"}:
        err = "invalid_grammar"
    return err, f"no backend enforces this {kind} ({each}){lenient}"


def _own(message: str) -> str:
    """A backend's refusal without its pointer to the others (auto tried them all)."""
    return re.sub(r"\s*\(--lenient compiles it unenforced[^()]*\)$", "", message)
