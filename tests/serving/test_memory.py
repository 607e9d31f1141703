"""The benchmarks' memory figures: a process's resident memory, alone and with what it
started, at the start and at the peak of a watched stretch."""

import os
import subprocess
import sys

from engine.serving.memory import PeakMemory, rss_bytes, rss_tree_bytes


def test_the_peak_counts_what_the_process_and_its_children_held():
    """200 MB held inside the watched stretch (released before it ends) raise the peak by
    at least that; a child's memory counts in the figure with workers only."""
    with PeakMemory() as mem:
        held = bytearray(200 * 2**20)
        held[::4096] = b"x" * len(held[::4096])  # touched: resident, not only reserved
        child = subprocess.Popen(
            [sys.executable, "-c", "import sys; b = bytearray(150 * 2**20); b[::4096] = "
             "b'y' * len(b[::4096]); sys.stdout.write('ok'); sys.stdout.flush(); input()"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
        )  # fmt: skip
        assert child.stdout.read(2) == "ok"
        mem.stop()  # the last sample is taken here, with both held
        child.communicate("\n")
        del held
    f = mem.figures()
    assert f["peak_mib"] - f["idle_mib"] >= 190
    assert f["peak_with_workers_mib"] - f["peak_mib"] >= 140
    assert rss_tree_bytes() >= rss_bytes(os.getpid()) > 0
