"""The server's socket, bound before anything heavy is imported, and the uvicorn server that
serves the whole app on it. `cfsm serve` binds first (well under a second after it starts),
so a client's first request is accepted by the kernel and waits in the backlog while Gradio
and the model load, instead of finding no server (the openai client's retries on a refused
connection give up within about 2 s; Gradio alone takes ~5 s to import and build). vLLM's
server binds its socket before its engine starts for the same reason. Light imports only."""

from __future__ import annotations

import socket
import threading
import time

BACKLOG = 2048


def listen(host: str, port: int) -> socket.socket:
    """A listening TCP socket on (host, port); raises OSError when the port is taken."""
    family = socket.AF_INET6 if ":" in host.strip("[]") else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host.strip("[]"), port))
    sock.listen(BACKLOG)
    sock.set_inheritable(False)
    return sock


class ServerThread:
    """uvicorn serving `app` on an already-listening socket, in a thread of its own;
    `close` stops it and waits for the thread."""

    START_LIMIT_S = 30.0

    def __init__(self, app, sock: socket.socket) -> None:
        import uvicorn

        self.sock = sock
        self.port = sock.getsockname()[1]
        config = uvicorn.Config(app, log_level="warning", timeout_graceful_shutdown=1)
        self.server = uvicorn.Server(config)
        self.server.install_signal_handlers = lambda: None  # the main thread keeps Ctrl-C
        self.thread = threading.Thread(
            target=self.server.run, kwargs={"sockets": [sock]}, daemon=True, name="uvicorn"
        )

    def start(self) -> None:
        self.thread.start()
        t0 = time.monotonic()
        while not self.server.started:
            if not self.thread.is_alive() or time.monotonic() - t0 > self.START_LIMIT_S:
                raise OSError(f"the server on port {self.port} did not start")
            time.sleep(0.005)

    def block(self) -> None:
        """Wait until the server stops (Ctrl-C stops it)."""
        try:
            while self.thread.is_alive():
                self.thread.join(0.5)
        except KeyboardInterrupt:
            self.close()

    def close(self) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=10)
        self.sock.close()
