"""Resident memory of a process and of everything it started (Linux /proc; 0 where
unavailable): what the compile workers' caps, the soaks and the benchmarks read."""

from __future__ import annotations

import contextlib
import os


def rss_bytes(pid: int) -> int:
    """Resident memory of one process."""
    with contextlib.suppress(OSError), open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


def _children(pid: int) -> list[int]:
    out: list[int] = []
    with contextlib.suppress(OSError):
        for tid in os.listdir(f"/proc/{pid}/task"):
            with contextlib.suppress(OSError), open(f"/proc/{pid}/task/{tid}/children") as f:
                out += [int(x) for x in f.read().split()]
    return out


def rss_tree_bytes(pid: int | None = None) -> int:
    """Resident memory of `pid` (this process by default) and all its descendants: a
    server and its compile workers under one budget."""
    total, todo, seen = 0, [pid or os.getpid()], set()
    while todo:
        p = todo.pop()
        if p in seen:
            continue
        seen.add(p)
        total += rss_bytes(p)
        todo += _children(p)
    return total
