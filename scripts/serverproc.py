"""Shared by the load and soak scripts: start `cfsm serve` on a loopback port (or use a
running one); engine/serving/memory.py reads its memory."""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import time
from pathlib import Path
from urllib.parse import urlparse

ROOT = Path(__file__).resolve().parent.parent


def loopback_only(url: str) -> None:
    if urlparse(url).hostname not in ("127.0.0.1", "localhost", "::1"):
        raise SystemExit("these scripts target loopback only")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def served(url: str | None, env: dict | None = None):
    """Yield (url, pid): the given server (pid None) or a fresh one started here."""
    if url:
        loopback_only(url)
        yield url, None
        return
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "cfsm", "serve", "--host", "127.0.0.1", "--port", str(port)],
        cwd=ROOT,
        env={**os.environ, **(env or {})},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}/"
    try:
        deadline = time.time() + 300
        while time.time() < deadline:
            with (
                contextlib.suppress(OSError),
                socket.create_connection(("127.0.0.1", port), timeout=1),
            ):
                break
            if proc.poll() is not None:
                raise SystemExit("the server exited while starting")
            time.sleep(0.5)
        yield url, proc.pid
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
