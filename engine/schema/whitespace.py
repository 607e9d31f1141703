"""The whitespace policy of a JSON document: where it may hold whitespace. One object that
the regex compiler, the native backends and the output writer all read."""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import CfsmError

WHITESPACE_POLICIES = ("compact", "spaced", "flexible")
FLEXIBLE_WS = "[ ]?"


@dataclass(frozen=True)
class WhitespacePolicy:
    """Where a JSON document may hold whitespace; one object that the regex compiler, the
    native backends and the output writer all read, so a run's backends agree."""

    name: str
    item: str  # the item separator written: compact and flexible write ",", spaced ", "
    key: str
    flexible: bool  # an optional whitespace (`pattern`) around every separator and bracket
    pattern: str = FLEXIBLE_WS

    @classmethod
    def of(cls, name: str) -> WhitespacePolicy:
        if name not in WHITESPACE_POLICIES:
            raise CfsmError(
                "invalid_input",
                f"whitespace policy must be one of {WHITESPACE_POLICIES}, not {name!r}",
            )
        spaced = name == "spaced"
        return cls(name, ", " if spaced else ",", ": " if spaced else ":", name == "flexible")

    @property
    def separators(self) -> tuple[str, str]:
        """(item, key) as json.dumps takes them."""
        return self.item, self.key
