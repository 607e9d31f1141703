"""Heavy or optional libraries, imported on first use.

Most commands never need them (`cfsm check` and the fsm backend's compile need none), and
each takes 0.3-2 s to import, so a module names one at its top as `lazy_module("torch")`
and the import happens at the first attribute read."""

from __future__ import annotations

import importlib
from types import ModuleType


class LazyModule:
    """Stands for a module until an attribute is read; then imports it once and forwards."""

    def __init__(self, name: str) -> None:
        self._name = name
        self._module: ModuleType | None = None

    def __getattr__(self, attr: str):
        module = self._module
        if module is None:
            module = self._module = importlib.import_module(self._name)
        return getattr(module, attr)


def lazy_module(name: str) -> LazyModule:
    return LazyModule(name)
