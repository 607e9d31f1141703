"""Heavy or optional libraries, imported on first use.

Most commands never need them (`cfsm check` and the fsm backend's compile need none), and
each takes 0.3-2 s to import, so a module names one at its top as
`torch = lazy_module("torch")` and the import happens at the first attribute read
(`torch.tensor(...)`), not when the module itself is imported. `import cfsm.cli` loads
numpy and nothing else from `HEAVY`.

The proxy leaves `sys.modules` alone (the real module lands there when it is imported, as
any import does) and is not `importlib.util.LazyLoader`: nothing runs until an attribute is
read, and a missing optional library raises its ImportError at that read, in the function
that needs it. `from torch import Tensor` at a module's top would import torch at once; write
`torch.Tensor` at the call site instead (annotations are strings under
`from __future__ import annotations`, so they read nothing).

Thread safety: `importlib.import_module` holds the import lock of the module it imports, so
two threads reading the first attribute at once both get the one module object; caching the
reference is a plain assignment.
"""

from __future__ import annotations

import importlib
from types import ModuleType

# Which libraries are loaded this way, and why each is heavy or optional (the project's
# modules import these only through `lazy_module`, or inside a function that says why).
HEAVY: dict[str, str] = {
    "torch": "1-2 s to import (CUDA probing); only decoding and the token-mask backends",
    "transformers": "1-2 s to import (pulls torch); only loading a model or a tokenizer",
    "tokenizers": "Rust extension, ~0.3 s; only building or reading a tokenizer",
    "huggingface_hub": "network client; only fetching a model snapshot",
    "safetensors": "only reading model weights (through transformers)",
    "gguf": "only reading a GGUF file's tokenizer",
    "xgrammar": "imports torch and triton; only the xgrammar backend and its triggers",
    "llguidance": "Rust extension, with llguidance.numpy/.torch; only the llguidance backend",
    "outlines_core": "Rust extension; only the outlines backend",
    "interegular": "only the regex backend that builds DFAs through interegular",
    "jsonschema": "format checkers and referencing, ~0.3 s; only when a schema is checked",
    "plotly": "~0.5 s; only the charts of the UI and the bench reports",
    "graphviz": "only drawing the automaton graph",
    "PIL": "only the step bundle's images",
    "llama_cpp_py_sync": "optional (x86_64 Linux wheel only); only the llama.cpp runtime",
    "numpy": "light, but kept lazy where a module otherwise needs nothing heavy",
    "regex": "only matching a schema's patternProperties against a key (with a time limit)",
}


class LazyModule:
    """Stands for a module until an attribute is read; then imports it once and forwards."""

    __slots__ = ("_name", "_module")

    def __init__(self, name: str) -> None:
        self._name = name
        self._module: ModuleType | None = None

    def _load(self) -> ModuleType:
        module = self._module
        if module is None:
            module = self._module = importlib.import_module(self._name)
        return module

    def __getattr__(self, attr: str):
        if attr in LazyModule.__slots__:  # not set yet (a copy made without __init__)
            raise AttributeError(attr)
        return getattr(self._load(), attr)

    def __dir__(self) -> list[str]:
        return dir(self._load())

    def __repr__(self) -> str:
        state = "loaded" if self._module is not None else "not loaded"
        return f"<lazy module {self._name!r} ({state})>"


def lazy_module(name: str) -> LazyModule:
    """A stand-in for the module `name` (dotted names work: "llguidance.torch") that
    imports it at the first attribute read and forwards every read after that.

    Use it for the libraries in `HEAVY`: the import costs 0.3-2 s, or the library is not
    installed everywhere, and most commands never touch it."""
    return LazyModule(name)
