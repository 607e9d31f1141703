"""Each private name of another library that engine/internals.py reads is still there:
an upgrade that renames one fails here, not silently in the feature."""

import importlib.util

import pytest


def test_no_other_module_reads_another_librarys_private_names():
    """The three names engine/internals.py wraps appear nowhere else in the code."""
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    needles = ("_cffi_bindings", "._queue", "active_jobs", "_symbol_mapping")
    found = [
        (str(p.relative_to(root)), n)
        for folder in ("engine", "app", "viz", "cfsm")
        for p in (root / folder).rglob("*.py")
        if p.name != "internals.py"
        for n in needles
        if n in p.read_text(encoding="utf-8")
    ]
    assert found == []


@pytest.mark.skipif(
    importlib.util.find_spec("llama_cpp_py_sync") is None, reason="llama.cpp bindings absent"
)
def test_llama_cpp_bindings_still_export_the_c_api_loader():
    from engine.internals import llama_cffi

    assert callable(llama_cffi.get_lib) and callable(llama_cffi.get_ffi)


def test_gradio_queue_still_lists_active_jobs():
    import gradio as gr

    from engine.internals import gradio_jobs

    with gr.Blocks() as demo:
        gr.Button("x")
    demo.queue()
    assert isinstance(demo._queue.active_jobs, list)  # the name gradio_jobs reads
    assert gradio_jobs(demo) == []
