"""Model loading on the registered runtimes (model_runtimes.py): llama.cpp decodes a GGUF
file as it is (the embedded SmolLM2, or any GGUF file or folder holding one); transformers
decodes a Hugging Face model available offline, or a GGUF converted once to a safetensors
cache (model_files.py).

`auto` picks llama.cpp for a GGUF model on the CPU, transformers otherwise (a Hugging Face
model, or CUDA)."""

from __future__ import annotations

import json as _json
import os
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import CfsmError
from ..lazy import lazy_module
from .model_files import (  # noqa: F401 - where callers have always found them
    EMBEDDED,
    EMBEDDED_NAME,
    _converted,
    _gguf_vocab_size,
    cache_dir,
    embedded_gguf_path,
    embedded_model_dir,
    gguf_file,
    resolve_model_source,
)
from .model_runtimes import (  # noqa: F401
    FALLBACK_RUNTIME,
    MODEL_RUNTIMES,
    SELF_CHECK_TEXT,
    get_runtime,
    pick_device,
    pick_dtype,
)

if TYPE_CHECKING:
    from ..runtimes.base import Runner

transformers = lazy_module("transformers")
hf_logging = lazy_module("transformers.utils.logging")

_LOCK = threading.Lock()
_LOADED: dict[tuple[str, str, str], LoadedModel] = {}


def resolve_runtime(runtime: str | None, model: str | None, device: str | None) -> str:
    """The runtime a model decodes on: `auto` takes the first registered runtime that suits
    the model and device and can run here (llama.cpp for a GGUF on the CPU), else the
    fallback (transformers); a runtime asked for by name is checked, not overridden."""

    cpu = pick_device(device) == "cpu"
    if runtime in (None, "", "auto"):
        for rt in MODEL_RUNTIMES.values():
            if rt.suits(model, cpu) and rt.refusal(model, cpu) is None:
                return rt.name
        return FALLBACK_RUNTIME
    refusal = get_runtime(runtime).refusal(model, cpu)
    if refusal is not None:
        raise refusal
    return runtime


def runtime_note(runtime: str, model: str | None, device: str | None) -> str:
    """One line when `auto` fell back past a runtime that suits the model (llama.cpp for a
    GGUF on the CPU) because it cannot run here: never silently slower."""

    cpu = pick_device(device) == "cpu"
    for rt in MODEL_RUNTIMES.values():
        if rt.name == runtime:
            return ""
        why = rt.unavailable_here() if rt.suits(model, cpu) else None
        if why:
            return f"{rt.label} unavailable ({why}): decoding on {runtime}, slower"
    return ""


@dataclass
class LoadedModel:
    """A model, its tokenizer and where it runs; shared across requests."""

    name: str
    model: Any
    tokenizer: Any
    device: str
    dtype: str
    load_seconds: float
    runner: Any = None  # an engine.runtimes Runner, self-checked at load
    self_check: dict | None = None
    runtime: str = "transformers"
    runtime_note: str = ""  # why not the faster runtime, when auto fell back (runtime_note())

    @property
    def vocab_size(self) -> int:
        """Rows of the output layer (may exceed the tokenizer's vocabulary)."""
        return MODEL_RUNTIMES[self.runtime].vocab_size(self.model)

    @property
    def architecture(self) -> str | None:
        return MODEL_RUNTIMES[self.runtime].architecture(self.model)

    @property
    def max_model_len(self) -> int | None:
        """The most tokens one request may hold, prompt and output (vLLM's max_model_len):
        the model's trained positions, and on llama.cpp no more than its KV cache."""
        return MODEL_RUNTIMES[self.runtime].max_model_len(self.model)

    @property
    def eos_token_id(self) -> int:
        eos = self.tokenizer.eos_token_id
        if eos is None:
            eos = MODEL_RUNTIMES[self.runtime].eos_fallback(self.model)
        if eos is None:
            raise CfsmError("unknown_model", f"model {self.name} defines no EOS token")
        return int(eos)


def _quiet_transformers() -> None:
    """No progress bars or advisory warnings on the CLI's stderr."""
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    try:
        hf_logging.set_verbosity_error()
        hf_logging.disable_progress_bar()
    except Exception:  # noqa: BLE001
        pass


def load_model(
    model: str | None = None,
    device: str | None = None,
    trust_remote_code: bool = False,
    runtime: str | None = None,
) -> LoadedModel:
    """Load (once per process and runtime) a causal LM; offline only."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    rt = resolve_runtime(runtime, model, device)
    dev = "cpu" if MODEL_RUNTIMES[rt].cpu_only else pick_device(device)
    key = (model or EMBEDDED, dev, str(trust_remote_code), rt)
    with _LOCK:
        if key in _LOADED:
            return _LOADED[key]
    _quiet_transformers()
    t0 = time.perf_counter()
    handle, tok, dtype = MODEL_RUNTIMES[rt].load(model, dev, trust_remote_code)
    lm = LoadedModel(_display_name(model), handle, tok, dev, dtype, 0.0, runtime=rt)
    lm.runner, lm.self_check = checked_runner(lm)
    lm.load_seconds = time.perf_counter() - t0
    with _LOCK:
        _LOADED.setdefault(key, lm)
        return _LOADED[key]


def _display_name(model: str | None) -> str:
    return EMBEDDED_NAME if not model or model == EMBEDDED else str(model)


def checked_runner(lm: LoadedModel):
    """The model's runner, after proving that a reused KV cache gives a fresh prefill's
    logits (raises `unsupported_model` otherwise), with its pass costs measured."""
    ids = list(lm.tokenizer.encode(SELF_CHECK_TEXT, add_special_tokens=False))
    runner = MODEL_RUNTIMES[lm.runtime].runner(lm.model, lm.tokenizer, lm.device, lm.eos_token_id)
    check = load_checks(runner, ids)
    check["prefix_reuse"] = runner.enable_prefix_reuse()  # after the timed passes
    return runner, check


def load_checks(runner: Runner, ids: list[int]) -> dict:
    """The runner's self-check and its measured pass costs, driven as a decode loop drives
    it (`decode_thread`): the checks compare logits with torch ops on the calling thread,
    and on a CPU those ops would start an OpenMP team of that thread's own. A model loaded
    on a thread that lives on (the command line's, a benchmark's) then left two teams, and
    libgomp's throttled barriers made every later 2-thread step slower than one thread
    (28.8 against 18.2 ms), so steps ran on one thread (`cfsm bench figures`: 3.2 s
    masked on the character preset, against 2.1 s)."""
    with runner.decode_thread():
        check = runner.self_check(ids)
        check["costs"] = runner.measure_costs(ids).to_json()
    if getattr(runner, "step_ms_by_threads", None):  # llama.cpp: the step threads measured
        # string keys: the trace is JSON (orjson, under Gradio, takes no int keys)
        check["step_ms_by_threads"] = {str(k): v for k, v in runner.step_ms_by_threads.items()}
    return check


def load_tokenizer(model: str | None = None, trust_remote_code: bool = False):
    """Tokenizer and output-vocabulary size without loading weights (for compile-only
    commands)."""

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    _quiet_transformers()
    gguf = gguf_file(model)
    source = str(_converted(gguf, weights=False)) if gguf else resolve_model_source(model)
    try:
        tok = transformers.AutoTokenizer.from_pretrained(
            source, trust_remote_code=trust_remote_code
        )
    except Exception as exc:  # noqa: BLE001
        raise CfsmError(
            "unknown_model", f"could not load the tokenizer of {model!r}: {exc}"
        ) from exc
    vocab = len(tok)
    cfg = Path(source) / "config.json"
    if cfg.exists():
        data = _json.loads(cfg.read_text())
        vocab = max(
            vocab, int(data.get("vocab_size") or data.get("text_config", {}).get("vocab_size") or 0)
        )
    if gguf is not None:
        vocab = max(vocab, _gguf_vocab_size(gguf))
    return tok, vocab
