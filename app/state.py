"""Engines the app serves, loaded in the background (the page is usable meanwhile)."""

from __future__ import annotations

import os
import re
import threading
import time
from pathlib import Path

from engine.errors import CfsmError
from engine.limits import LOAD_WAIT_S
from engine.serving.metrics import ServingMetrics
from engine.serving.service import Engine
from engine.serving.trace_store import TraceStore
from viz.summaries import model_card

MAX_MODELS = 2
DECODE_SLOTS = 16  # page and API requests decoded together in the running batch


class RunHandle:
    """One page run's Stop switch and what it was doing, so Stop can say what happened."""

    def __init__(self) -> None:
        self.event = threading.Event()
        self.phase = "starting"
        self.detail = ""
        self.t0 = time.time()
        # a finished run whose last updates are not sent yet (its trace, and the rest of
        # its step view's bundle): Stop then cancels only those, and sends them itself
        self.unsent: tuple[dict, str] | None = None
        self.line = ""  # what Stop said

    def set_phase(self, phase: str, detail: str = "") -> None:
        self.phase, self.detail, self.t0 = phase, detail, time.time()

    def stop(self) -> str:
        """Cancel the run; returns the line the page shows (kept as `line`, set before the
        switch flips, so the run's handler can show it too)."""
        self.line = self._line()
        self.event.set()
        return self.line

    def _line(self) -> str:
        took = time.time() - self.t0
        if self.phase == "compiling":
            return (
                f"Stopped while compiling {self.detail} ({took:.1f} s in). The compile goes on in "
                "the background until it finishes or hits its time limit; a later run with the "
                "same constraint reuses its result."
            )
        if self.phase == "decoding":
            return f"Stopped after {took:.1f} s of decoding; only this run was cancelled."
        if self.phase == "done":
            return ""  # nothing to stop: the page keeps its summary
        return "Stopped before decoding started."


def models_dir() -> Path:
    """The only folder from which the page may load local models (CFSM_MODELS_DIR)."""
    root = os.environ.get("CFSM_MODELS_DIR") or os.path.join(
        os.path.expanduser("~"), ".cache", "cfsm-lab", "models"
    )
    return Path(root)


def check_page_model(name: str) -> str:
    """Model names typed in the page: the embedded model, an HF id (owner/name), or a
    folder inside the allowlisted models folder. Anything else is refused."""
    name = (name or "").strip()
    if name in ("", "embedded"):
        return "embedded"
    if len(name) > 200:
        raise CfsmError("unknown_model", "model name is too long")
    p = Path(name).expanduser()
    if name.startswith(("/", ".", "~")) or p.is_absolute():
        base = models_dir().resolve()
        try:
            rp = p.resolve()
        except OSError as exc:
            raise CfsmError("unknown_model", f"bad model path {name!r}") from exc
        if not rp.is_relative_to(base):
            raise CfsmError("unknown_model", f"the page may only load local models from {base}")
        return str(rp)

    if not re.fullmatch(r"[A-Za-z0-9][\w.\-]*(/[\w.\-]+)?", name) or ".." in name:
        raise CfsmError("unknown_model", f"{name!r} is not a Hugging Face model id")
    return name


class EngineHub:
    """Loads engines once, in background threads, and reports progress."""

    def __init__(
        self, default_model: str | None = None, device: str | None = None, **limits
    ) -> None:
        self.default = default_model or "embedded"
        self.device = device
        self.limits = {
            k: v for k, v in limits.items() if v is not None
        }  # Engine's max_states, compile_timeout_s, runtime
        self._engines: dict[str, object] = {}
        self._errors: dict[str, str] = {}
        self._started: dict[str, float] = {}
        self._lock = threading.Lock()
        self.load_wait_s = LOAD_WAIT_S  # how long an API request waits for the model
        self.traces = TraceStore()  # API requests' traces, opened by /?trace=ID
        self.metrics = ServingMetrics(self.peek)  # this server's own registry (/metrics)

    def start(self, name: str | None = None) -> None:
        name = name or self.default
        with self._lock:
            if name in self._engines or name in self._started:
                return
            self._started[name] = time.time()
        threading.Thread(target=self._load, args=(name,), daemon=True, name=f"load-{name}").start()

    def _load(self, name: str) -> None:
        try:
            eng = Engine(
                None if name == "embedded" else name, self.device, continuous=True, **self.limits
            )
            with self._lock:
                if len(self._engines) >= MAX_MODELS:
                    oldest = next(k for k in self._engines if k != self.default)
                    self._engines.pop(oldest).close()  # its running requests finish first
                    self._started.pop(oldest, None)  # so that it can be loaded again
                self._engines[name] = eng
        except CfsmError as exc:
            with self._lock:
                self._errors[name] = exc.message
                self._started.pop(name, None)
        except Exception as exc:  # noqa: BLE001
            with self._lock:
                self._errors[name] = " ".join(str(exc).split())
                self._started.pop(name, None)

    def status(self, name: str | None = None) -> str:
        name = name or self.default
        with self._lock:
            eng = self._engines.get(name)
            if eng is not None:
                lm = eng.lm

                return (
                    f"Model ready ({lm.dtype}, loaded in {lm.load_seconds:.1f} s): "
                    f"{model_card(eng.decoder.model_info())}"
                )
            if name in self._errors:
                return f"Model failed to load: {self._errors[name]}"
            if name in self._started:
                return f"Loading model {name} \u2026 {time.time() - self._started[name]:.0f} s"
        return "Model not loaded yet."

    def peek(self, name: str | None = None):
        """The engine if it is loaded, else None (never waits, never starts a load)."""
        with self._lock:
            return self._engines.get(name or self.default)

    def get(self, name: str | None = None, wait_s: float = 180.0):
        name = name or self.default
        self.start(name)
        t0 = time.time()
        while time.time() - t0 < wait_s:
            with self._lock:
                if name in self._engines:
                    return self._engines[name]
                if name in self._errors:
                    raise CfsmError("unknown_model", self._errors.pop(name))
            time.sleep(0.1)
        raise CfsmError("unknown_model", f"model {name} is still loading; try again shortly")
