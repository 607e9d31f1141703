"""How the decoding's worker threads wait when a page shares the machine's cores."""

from __future__ import annotations

import os


def share_cores_with_page() -> None:
    """Let OpenMP workers sleep, not spin, while they wait (`OMP_WAIT_POLICY=PASSIVE`,
    unless the user set a policy). llama.cpp's CPU kernels and PyTorch's run on OpenMP
    threads that busy-wait for work by default; on a served page the browser, the web
    server and the streamed updates need the same cores, and a spinning worker takes their
    time slices, so they preempt the decoding in turn. Measured on a 2-core machine with
    the page open: the character preset's llama.cpp decode 4.5-6.6 s spinning, 2.9-3.0 s
    passive (1.6 s with no page either way). The policy is read when OpenMP loads, so this
    runs before torch or llama.cpp is imported (the CLI calls it before importing the app);
    called later it changes nothing."""
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
