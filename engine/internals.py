"""The one place that reads other libraries' private names, where they offer no public way.
Each access is a small function here, and tests/test_internals.py fails when the library
changes the name, instead of the feature failing silently:

- llama.cpp's C functions: `llama_cpp_py_sync` loads them in `_cffi_bindings` and exports
  only its high-level `Llama`; the runtime drives batches and the KV cache itself.
- Gradio's job queue: whether an API caller's job is still alive (Gradio marks a job dead
  when its client goes away, but cannot stop a function already running in a thread)."""

from __future__ import annotations

from .lazy import lazy_module

llama_cffi = lazy_module("llama_cpp_py_sync._cffi_bindings")


def llama_lib_and_ffi():
    """(lib, ffi) of llama.cpp's C API as `llama_cpp_py_sync` loaded it."""
    return llama_cffi.get_lib(), llama_cffi.get_ffi()


def gradio_jobs(demo) -> list:
    """The jobs in a Gradio app's queue (each with `session_hash` and `alive`); [] where
    the app has no queue yet."""
    queue = getattr(demo, "_queue", None)
    return [j for js in getattr(queue, "active_jobs", None) or [] if js for j in js]
