"""One error type for everything a user can get wrong, so every surface (CLI, app)
can show a one-line message instead of a traceback."""

from __future__ import annotations

import re


class CfsmError(Exception):
    """A user-facing error with a machine-readable kind.

    Kinds used across the project: invalid_regex, unsupported_feature, state_explosion,
    compile_timeout, invalid_schema, unsatisfiable, prefix_outside_language,
    unknown_model, unknown_backend, invalid_input, input_too_large, invalid_grammar,
    dead_end, unsupported_model (the model cannot be decoded correctly with the installed
    transformers), unsupported_runtime (a runtime asked for by name cannot run on this
    machine: no build for it, missing CPU instructions, a library that does not load),
    compile_failed.
    """

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind
        self.message = " ".join(str(message).split())  # always one line

    def to_json(self) -> dict:
        return {"error": {"kind": self.kind, "message": self.message}}

    def __str__(self) -> str:
        return f"{self.kind}: {self.message}"


def native_message(exc: BaseException) -> str:
    """A native library's error without its log prefix (time stamp, C++ source path),
    which means nothing to a user: `[08:40:40] /project/cpp/grammar_parser.cc:820: EBNF
    parser error ...` -> `EBNF parser error ...`."""

    text = " ".join(str(exc).split())
    text = re.sub(r"^(\[[0-9:.]+\]\s*)?(\S+\.(cc|cpp|h|hpp|rs):\d+:\s*)?", "", text)
    # xgrammar prints the token it found, which at the end of the text is nothing
    return re.sub(r"\bbut got$", "but got the end of the grammar", text)
