"""Names read from a registry at each use: the lists of backends and runtimes the CLI, the
page and the tests take, so that one registered later is in them too."""

from __future__ import annotations

from collections.abc import Callable, Sequence


class LiveNames(Sequence[str]):
    """A tuple of names that `read()` gives afresh whenever it is looked at."""

    def __init__(self, read: Callable[[], tuple[str, ...]]) -> None:
        self._read = read

    def __getitem__(self, i):  # type: ignore[override]
        return self._read()[i]

    def __len__(self) -> int:
        return len(self._read())

    def __eq__(self, other: object) -> bool:
        return tuple(self) == tuple(other) if isinstance(other, Sequence) else NotImplemented

    def __hash__(self) -> int:
        return hash(self._read())

    def __repr__(self) -> str:
        return repr(self._read())
