"""What the user constrains with: a value (kind, text, whitespace policy, lenient, spec
reading) that every layer passes around and keys caches by. Reading and lowering a schema
is the schema package's work (engine/schema)."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from .errors import CfsmError
from .limits import MAX_GRAMMAR_CHARS, MAX_REGEX_CHARS, MAX_SCHEMA_REGEX_CHARS
from .schema import WhitespacePolicy, compile_schema_regex, parse_schema

KINDS = ("regex", "schema", "grammar")


@dataclass(frozen=True)
class Constraint:
    kind: str
    text: str
    whitespace: str = "compact"
    lenient: bool = False  # compile keywords a backend cannot enforce, with a warning
    # JSON Schema's own reading: objects stay open unless `additionalProperties` closes
    # them, and an integer value may be written `1.0`. The default is generation's
    # reading: objects that list `properties` are closed, each number has one spelling.
    spec: bool = False

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise CfsmError(
                "invalid_input", f"constraint kind must be one of {KINDS}, not {self.kind!r}"
            )
        WhitespacePolicy.of(self.whitespace)  # an unknown policy says so

    @property
    def ws(self) -> WhitespacePolicy:
        return WhitespacePolicy.of(self.whitespace)

    @classmethod
    def from_inputs(
        cls,
        kind: str,
        text: str,
        whitespace: str = "compact",
        lenient: bool = False,
        spec: bool = False,
        require_text: bool = True,
    ) -> Constraint:
        """A constraint from what a user typed (page, API, CLI, a requests line): lenient and
        the spec reading apply to schemas only; an empty field and an oversized grammar are
        refused by name."""
        if kind not in KINDS:
            raise CfsmError(
                "invalid_input", f"constraint kind must be one of {KINDS}, not {kind!r}"
            )
        if not isinstance(text, str):
            raise CfsmError("invalid_input", f"the {kind} must be text, not {type(text).__name__}")
        if require_text and not text.strip():
            raise CfsmError("invalid_input", f"the {kind} is empty")
        if kind == "grammar" and len(text) > MAX_GRAMMAR_CHARS:
            raise CfsmError(
                "input_too_large", f"grammar is longer than {MAX_GRAMMAR_CHARS} characters"
            )
        schema = kind == "schema"
        return cls(
            kind, text, whitespace or "compact", bool(lenient) and schema, bool(spec) and schema
        )

    @property
    def key(self) -> str:
        h = hashlib.sha256(
            f"{self.kind}\x00{self.whitespace}\x00{int(self.lenient)}{int(self.spec)}\x00{self.text}".encode(
                "utf-8", "surrogatepass"
            )
        )
        return h.hexdigest()[:20]

    @property
    def max_regex_chars(self) -> int:
        """How long its regex may be: a typed regex is held to the input limit, a schema's
        compiled regex to the lowering's budget (schema/budget.py)."""
        return MAX_REGEX_CHARS if self.kind == "regex" else MAX_SCHEMA_REGEX_CHARS

    def schema_obj(self) -> dict | bool:
        return parse_schema(self.text)

    def regex(self) -> str | None:
        """The regex behind the FSM view (None for grammars, which have no finite automaton)."""
        if self.kind == "regex":
            return self.text
        if self.kind == "schema":
            return compile_schema_regex(self.text, self.whitespace, self.lenient, self.spec).regex
        return None

    def regex_warnings(self) -> list[str]:
        """What the regex path leaves unenforced (only ever non-empty when lenient)."""
        if self.kind != "schema":
            return []
        return list(
            compile_schema_regex(self.text, self.whitespace, self.lenient, self.spec).warnings
        )


__all__ = ["KINDS", "Constraint"]
