"""One error type for everything a user can get wrong, so every surface (CLI, app, /v1)
can show a one-line message instead of a traceback; and one typed list of its kinds, each
with what every surface does with it (HTTP status, retry, CLI exit code, meaning)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import Enum, unique


@dataclass(frozen=True)
class KindSpec:
    """What a kind means to each surface: the HTTP status /v1 answers with, whether a
    client should send the same request again later (then with `Retry-After`), the CLI's
    exit code, and the one line the docs' table shows."""

    status: int
    retryable: bool
    exit_code: int
    meaning: str


BAD_INPUT, RETRY_LATER, BUG = 2, 75, 1  # CLI exit codes (75: sysexits' EX_TEMPFAIL)


def _bad(meaning: str, status: int = 400) -> KindSpec:
    return KindSpec(status, False, BAD_INPUT, meaning)


@unique
class ErrorKind(Enum):
    """Every kind a CfsmError may carry. The docs' table (docs/errors.md) is this list,
    written by `kinds_table` and checked by the docs test."""

    INVALID_REGEX = _bad("the regex does not parse")
    UNSUPPORTED_FEATURE = _bad(
        "a construct or keyword the backend cannot enforce; the message names it and where "
        "(look-around, back-reference, `\\b`, `uniqueItems`, ...)"
    )
    STATE_EXPLOSION = _bad(
        "the automaton, or the schema's lowering, grows past its limit (10,000 DFA states by "
        "default); the message names where"
    )
    COMPILE_TIMEOUT = _bad("the compile took longer than its limit (20 s by default)")
    COMPILE_MEMORY = _bad("a compile worker went past its memory cap (docs/limits.md)")
    COMPILE_FAILED = _bad(
        "a library failed to compile the constraint, or its compile worker stopped"
    )
    INVALID_SCHEMA = _bad("not a valid JSON schema")
    INVALID_GRAMMAR = _bad("the grammar does not parse for its backend")
    UNSATISFIABLE = _bad("the language is empty (`enum: []`, schema `false`, ...)")
    PREFIX_OUTSIDE_LANGUAGE = _bad("a `cfsm jump` prefix no text of the language starts with")
    UNSUPPORTED_MODEL = _bad(
        "the model cannot be decoded here (the installed transformers cannot decode it with a "
        "reused KV cache; a recurrent or hybrid GGUF)"
    )
    UNSUPPORTED_RUNTIME = _bad(
        "the runtime asked for by name cannot run on this machine (no build for the "
        "platform, missing CPU instructions, a library that does not load); `auto` falls "
        "back to another instead"
    )
    UNKNOWN_MODEL = _bad("no such model, or one that failed to load", 404)
    UNKNOWN_BACKEND = _bad("no such backend")
    INPUT_TOO_LARGE = _bad("an input over its size limit")
    INVALID_INPUT = _bad("anything else wrong with the input (a missing field, a bad line)")
    EXCEEDS_CAPACITY = _bad(
        "the request can never fit this server (more KV cells than its whole cache): ask "
        "for fewer tokens, or start the server with a larger cache"
    )
    BUSY = KindSpec(
        429, True, RETRY_LATER, "the server is full right now; the same request later may fit"
    )
    MODEL_LOADING = KindSpec(503, True, RETRY_LATER, "the model is still loading")
    RUNTIME_ERROR = KindSpec(
        500, False, BUG, "the runtime's decode failed; that pass's requests fail, the server "
        "keeps serving"
    )  # fmt: skip
    DEAD_END = KindSpec(
        422, False, BUG, "a backend refused a token its own mask allowed (a backend bug or "
        "a limit of its parser, named in the message), reported instead of decoding on; the "
        "same request fails the same way, so it is not a 5xx a client would retry; counted "
        "in /metrics as `cfsm:errors{code=\"dead_end\"}`"
    )  # fmt: skip
    INTERNAL = KindSpec(500, False, BUG, "a bug: each place that answered it has a test")

    @property
    def spec(self) -> KindSpec:
        return self.value

    @classmethod
    def of(cls, name: str) -> ErrorKind:
        """The kind named `name`; a name not in the list is a bug in the caller."""
        try:
            return cls[name.upper()]
        except KeyError:
            raise ValueError(f"unknown error kind {name!r}") from None


def kinds_table() -> str:
    """The docs' table of error kinds, written from the list itself."""
    rows = [
        "| kind | HTTP | retry | CLI exit | meaning |",
        "|---|---|---|---|---|",
    ]
    for k in ErrorKind:
        s = k.spec
        retry = "yes, after `Retry-After`" if s.retryable else "no"
        rows.append(f"| `{k.name.lower()}` | {s.status} | {retry} | {s.exit_code} | {s.meaning} |")
    return "\n".join(rows)


class CfsmError(Exception):
    """A user-facing error with a machine-readable kind (one of ErrorKind, by name)."""

    def __init__(self, kind: str | ErrorKind, message: str) -> None:
        super().__init__(message)
        self.error_kind = kind if isinstance(kind, ErrorKind) else ErrorKind.of(kind)
        self.kind = self.error_kind.name.lower()
        self.message = " ".join(str(message).split())  # always one line

    @property
    def spec(self) -> KindSpec:
        return self.error_kind.spec

    def to_json(self) -> dict:
        return {"error": {"kind": self.kind, "message": self.message}}

    def __str__(self) -> str:
        return f"{self.kind}: {self.message}"


def internal_error(exc: BaseException) -> CfsmError:
    """An unexpected exception as the one line a user sees (kind `internal`: a bug)."""
    return CfsmError(ErrorKind.INTERNAL, f"{type(exc).__name__}: {exc}")


def native_message(exc: BaseException | str) -> str:
    """A native library's error without its log prefix (time stamp, C++ source path),
    which means nothing to a user: `[08:40:40] /project/cpp/grammar_parser.cc:820: EBNF
    parser error ...` -> `EBNF parser error ...`."""

    text = " ".join(str(exc).split())
    text = re.sub(r"^(\[[0-9:.]+\]\s*)?(\S+\.(cc|cpp|h|hpp|rs):\d+:\s*)?", "", text)
    # xgrammar prints the token it found, which at the end of the text is nothing
    return re.sub(r"\bbut got$", "but got the end of the grammar", text)
