"""What one schema's lowering to a regex may spend, checked while it builds (it runs in
the server for every backend, outside the killable compile workers): the regex's length,
the characters written in all (nested objects copy their members), and time. Past any of
them the error names the JSON pointer that grew, instead of the process growing until the
kernel kills it."""

from __future__ import annotations

import time
from collections.abc import Callable

from ..errors import CfsmError
from ..limits import COMPILE_TIMEOUT_S, MAX_SCHEMA_REGEX_CHARS

WORK_FACTOR = 50  # characters written in all, as a multiple of the regex's limit


class LoweringBudget:
    """One lowering's limits; `check` and `charge` raise CfsmError naming `ptr`."""

    def __init__(
        self, max_chars: int = MAX_SCHEMA_REGEX_CHARS, timeout_s: float = COMPILE_TIMEOUT_S
    ) -> None:
        self.max_chars, self.timeout_s = max_chars, timeout_s
        self.deadline = time.monotonic() + timeout_s
        self.written = 0
        # a walked path as the place the raw schema has (set by the lowering that owns it)
        self.place: Callable[[str], str] = lambda ptr: ptr or "/"

    def check(self, ptr: str) -> None:
        """Raise `compile_timeout` once the lowering has run past its time."""
        if time.monotonic() > self.deadline:
            raise CfsmError(
                "compile_timeout",
                f"turning the schema into a regex took longer than {self.timeout_s:g} s "
                f"(at {self.place(ptr)}); xgrammar or llguidance compile such schemas natively",
            )

    def charge(self, size: int, ptr: str) -> None:
        """Account for a part of `size` characters about to be written at `ptr`: refused
        before it is built when it, or all the lowering has written, is past the limit."""
        self.written += size
        if size > self.max_chars or self.written > WORK_FACTOR * self.max_chars:
            what = size if size > self.max_chars else self.written
            raise CfsmError(
                "state_explosion",
                f"the schema's regex grows past {self.max_chars:,} characters at {self.place(ptr)} "
                f"({what:,}: optional properties, nested objects and repeated $refs multiply "
                "it); xgrammar or llguidance compile such schemas natively",
            )
