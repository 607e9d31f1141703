"""The runtimes a model can decode on, by registry: each says which models and devices it
suits, whether it can run here, how it loads a model, which Runner (engine/runtimes) it
steps with, and the facts of a loaded model only it can read. `auto` takes the first
registered runtime that suits the model and can run; the loading code, the decoding loop,
the page and the CLI ask the registry instead of comparing names."""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any

from ..errors import CfsmError
from ..lazy import lazy_module
from ..live_names import LiveNames
from ..runtimes import llamacpp_lib
from ..runtimes.base import Runner
from ..runtimes.llamacpp_runner import LlamaCppRunner, LlamaModel
from ..runtimes.transformers_runner import ModelRunner
from .model_files import _converted, gguf_file, resolve_model_source

torch = lazy_module("torch")
transformers = lazy_module("transformers")


# a sentence every runtime's self-check decodes (and llama.cpp's tokenizer check splits)
SELF_CHECK_TEXT = 'The quick brown fox jumps over the lazy dog. {"name": "Ada", "age": 36}'


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


class ModelRuntime(ABC):
    """One way to run a model's forward passes. Stateless: every method is pure unless it
    says otherwise, and a refusal is a CfsmError."""

    name: str = ""
    label: str = ""  # what the page's cards and the model card call it
    cpu_only: bool = False  # the device is then always "cpu"

    def suits(self, model: str | None, cpu: bool) -> bool:
        """Whether `auto` would pick it for this model and device (if it can run here)."""
        return True

    def refusal(self, model: str | None, cpu: bool) -> CfsmError | None:
        """Why it cannot decode this model on this device here, asked by name (None: it
        can). Reads the platform (a library that does not load), changes nothing."""
        why = self.unavailable_here()
        return CfsmError("unsupported_runtime", why) if why else None

    def unavailable_here(self) -> str | None:
        """Why it cannot run on this machine at all (a library that does not load)."""
        return None

    @abstractmethod
    def load(self, model: str | None, device: str, trust_remote_code: bool) -> tuple[Any, Any, str]:
        """(the model's handle, its tokenizer, the dtype's name), read from local files
        only. Raises CfsmError `unknown_model` for a model it cannot read."""

    @abstractmethod
    def runner(self, handle: Any, tokenizer: Any, device: str, eos_id: int) -> Runner:
        """The Runner that steps `handle` (not yet self-checked). Raises CfsmError
        `unsupported_model` when the handle and the tokenizer disagree."""

    @abstractmethod
    def vocab_size(self, handle: Any) -> int:
        """Rows of the output layer (may exceed the tokenizer's vocabulary)."""

    def architecture(self, handle: Any) -> str | None:
        return None

    def max_model_len(self, handle: Any) -> int | None:
        """The most tokens one request may hold, prompt and output."""
        return None

    def eos_fallback(self, handle: Any) -> int | None:
        """The EOS id where the tokenizer names none."""
        return None


class LlamaCppRuntime(ModelRuntime):
    """llama.cpp on the CPU: a GGUF file as it is."""

    name, label, cpu_only = "llamacpp", "llama.cpp", True

    def suits(self, model: str | None, cpu: bool) -> bool:
        return cpu and gguf_file(model) is not None

    def refusal(self, model: str | None, cpu: bool) -> CfsmError | None:
        if not cpu:
            return CfsmError("invalid_input", "the llama.cpp runtime runs on the CPU only here")
        if gguf_file(model) is None:
            return CfsmError(
                "unknown_model", f"the llama.cpp runtime needs a GGUF model; {model!r} is not one"
            )
        why = self.unavailable_here()
        if why is not None:
            return CfsmError("unsupported_runtime", f"{why}; use --runtime transformers")
        return None

    def unavailable_here(self) -> str | None:
        return llamacpp_lib.unavailable_reason()

    def load(self, model: str | None, device: str, trust_remote_code: bool):
        gguf = gguf_file(model)
        tok = transformers.AutoTokenizer.from_pretrained(str(_converted(gguf, weights=False)))
        llm = LlamaModel(str(gguf))
        return llm, tok, (llm.desc.split()[-1] if llm.desc else "gguf")

    def runner(self, handle, tokenizer, device: str, eos_id: int) -> Runner:
        ids = list(tokenizer.encode(SELF_CHECK_TEXT, add_special_tokens=False))
        own = handle.tokenize(SELF_CHECK_TEXT)
        if own != ids:
            raise CfsmError(
                "unsupported_model",
                "llama.cpp and the tokenizer read from the GGUF split a test sentence "
                f"differently ({len(own)} vs {len(ids)} tokens): the grammar's token masks "
                "would not match the model's tokens",
            )
        return LlamaCppRunner(handle)

    def vocab_size(self, handle) -> int:
        return handle.n_vocab

    def architecture(self, handle) -> str | None:
        return handle.meta("general.architecture")

    def max_model_len(self, handle) -> int | None:
        arch = handle.meta("general.architecture")
        trained = handle.meta(f"{arch}.context_length") if arch else None
        n_ctx = int(handle.n_ctx)
        return min(n_ctx, int(trained)) if trained and trained.isdigit() else n_ctx


class TransformersRuntime(ModelRuntime):
    """PyTorch through transformers, on the CPU or CUDA: a Hugging Face folder, a model in
    the local hub cache, or a GGUF dequantized once to safetensors."""

    name, label = "transformers", "transformers (PyTorch)"

    def load(self, model: str | None, device: str, trust_remote_code: bool):
        source = resolve_model_source(model)
        dtype = pick_dtype(device)
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
        mdl.to(device)
        mdl.eval()
        torch.set_grad_enabled(False)
        return mdl, tok, str(dtype).replace("torch.", "")

    def runner(self, handle, tokenizer, device: str, eos_id: int) -> Runner:
        return ModelRunner(handle, device, pad_id=eos_id)

    def vocab_size(self, handle) -> int:
        return int(handle.get_output_embeddings().weight.shape[0])

    def architecture(self, handle) -> str | None:
        return getattr(handle.config, "model_type", None)

    def max_model_len(self, handle) -> int | None:
        return getattr(handle.config, "max_position_embeddings", None)

    def eos_fallback(self, handle) -> int | None:
        eos = getattr(handle.generation_config, "eos_token_id", None)
        return eos[0] if isinstance(eos, list) else eos


# in `auto`'s order of preference; the last one suits every model
MODEL_RUNTIMES: dict[str, ModelRuntime] = {
    r.name: r for r in (LlamaCppRuntime(), TransformersRuntime())
}
FALLBACK_RUNTIME = "transformers"


def register_runtime(rt: ModelRuntime, first: bool = False) -> None:
    """Add a runtime (a new name); `first`: `auto` prefers it to the others."""
    if not rt.name or rt.name in MODEL_RUNTIMES or rt.name == "auto":
        raise ValueError(f"a runtime needs a new name, not {rt.name!r}")
    items = list(MODEL_RUNTIMES.items())
    items = [(rt.name, rt), *items] if first else [*items[:-1], (rt.name, rt), items[-1]]
    MODEL_RUNTIMES.clear()
    MODEL_RUNTIMES.update(items)


def unregister_runtime(name: str) -> None:
    if name != FALLBACK_RUNTIME:
        MODEL_RUNTIMES.pop(name, None)


def runtime_names() -> tuple[str, ...]:
    return tuple(MODEL_RUNTIMES)


# `auto` and the registered runtimes, read at each use (the page's dropdown and its
# permalink check list a runtime registered later too)
RUNTIME_CHOICES = LiveNames(lambda: ("auto", *MODEL_RUNTIMES))


def get_runtime(name: str) -> ModelRuntime:
    rt = MODEL_RUNTIMES.get(name)
    if rt is None:
        raise CfsmError(
            "invalid_input",
            f"runtime must be one of auto, {', '.join(MODEL_RUNTIMES)}, not {name!r}",
        )
    return rt
