"""Requests files (`--requests FILE.jsonl`): read line by line in bounded memory, each
line answered whatever another did, and the exit code from how many answers were errors."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from engine.errors import CfsmError, internal_error


def read_user_file(path: str, what: str, limit: int) -> str:
    """A file the user named, as text: a missing, unreadable, too large or non-UTF-8 file
    is the user's error (`invalid_input`, `input_too_large`), named with its flag."""
    p = Path(path)
    try:
        if p.stat().st_size > limit:
            raise CfsmError("input_too_large", f"{what} {path} is over {limit:,} bytes")
        return p.read_text(encoding="utf-8")
    except OSError as exc:
        raise CfsmError("invalid_input", f"{what} {path}: {exc.strerror or exc}") from None
    except UnicodeDecodeError as exc:
        raise CfsmError("invalid_input", f"{what} {path} is not UTF-8 text: {exc}") from None


def read_jsonl(path: str):
    """The lines of a JSONL file, one at a time (a file of any length in bounded memory):
    each non-blank line as its parsed value, or as the CfsmError that says why it is not
    JSON, so a bad line becomes that line's answer and the file goes on."""
    try:
        f = open(path, "rb")  # noqa: SIM115 - closed by the with below
    except OSError as exc:
        raise CfsmError("invalid_input", f"cannot read {path}: {exc.strerror}") from None
    with f:
        for n, raw in enumerate(f, 1):
            if raw.strip():
                try:
                    yield json.loads(raw.decode("utf-8"))
                except (ValueError, RecursionError) as exc:  # not UTF-8, not JSON, too deep
                    yield CfsmError("invalid_input", f"{path}:{n}: not JSON: {exc}")


def line_error(exc: BaseException) -> dict:
    """One request line's failure as its answer: the error's own kind, or `internal` (a
    bug: every `internal` answer has a test that it no longer happens)."""
    return (exc if isinstance(exc, CfsmError) else internal_error(exc)).to_json()


class BatchTally:
    """How many answer lines of a requests file were errors: the exit code and the count on
    stderr come from it."""

    def __init__(self) -> None:
        self.answers = self.failed = 0

    def record(self, out: dict) -> dict:
        self.answers += 1
        self.failed += "error" in out
        return out

    def exit_code(self, what: str) -> int:
        if not self.failed:
            return 0
        print(f"{self.failed} of {self.answers} {what} failed", file=sys.stderr)
        return 2


REQUESTS_WINDOW = 64  # --requests lines in flight at a time


def windows(items, size: int = REQUESTS_WINDOW):
    window: list = []
    for item in items:
        window.append(item)
        if len(window) == size:
            yield window
            window = []
    if window:
        yield window
