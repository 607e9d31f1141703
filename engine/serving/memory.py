"""Resident memory of a process and of everything it started (Linux /proc; 0 where
unavailable): what the compile workers' caps, the soaks and the benchmarks read."""

from __future__ import annotations

import contextlib
import os
import threading


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


class PeakMemory:
    """This process's resident memory, alone and with everything it started (its compile
    workers), sampled every 0.2 s from `with` to its end: a benchmark's peak figures."""

    def __init__(self) -> None:
        self.idle = rss_bytes(os.getpid())
        self.peak = self.peak_tree = self.idle
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True)

    def _watch(self) -> None:
        while not self._stop.wait(0.2):
            self._sample()

    def _sample(self) -> None:
        self.peak = max(self.peak, rss_bytes(os.getpid()))
        self.peak_tree = max(self.peak_tree, rss_tree_bytes())

    def start(self) -> PeakMemory:
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop watching, after one last sample (what is held at the end counts too)."""
        self._stop.set()
        self._thread.join()
        self._sample()

    def __enter__(self) -> PeakMemory:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    def figures(self) -> dict:
        mib = 2**20
        return {
            "idle_mib": round(self.idle / mib),
            "peak_mib": round(self.peak / mib),
            "peak_with_workers_mib": round(self.peak_tree / mib),
        }
