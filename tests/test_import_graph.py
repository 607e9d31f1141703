"""The layering holds: no import cycles among the project's modules, and imports inside
functions only where they load an optional or heavy library on purpose. Read from the
source (ast), so the check costs nothing and fails on the line that breaks it."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("engine", "viz", "app", "cfsm")
# imported inside functions on purpose: heavy at import (torch, transformers, gradio,
# xgrammar with triton, plotly, the browser driver) or optional (not installed everywhere:
# llama.cpp's bindings, outlines for the peers benchmark)
LAZY_OK = {
    "torch",
    "transformers",
    "tokenizers",
    "huggingface_hub",
    "gguf",
    "xgrammar",
    "llguidance",
    "outlines_core",
    "outlines",
    "interegular",
    "jsonschema",
    "llama_cpp_py_sync",
    "gradio",
    "plotly",
    "graphviz",
    "PIL",
    "playwright",
}


IMPORTS = (ast.Import, ast.ImportFrom)
FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef)


def modules() -> dict[str, Path]:
    out = {}
    for pkg in PACKAGES:
        for p in (ROOT / pkg).rglob("*.py"):
            parts = list(p.relative_to(ROOT).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            out[".".join(parts)] = p
    return out


def _absolute(mod: str, node: ast.ImportFrom, is_pkg: bool) -> str:
    if not node.level:
        return node.module or ""
    base = mod.split(".") if is_pkg else mod.split(".")[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def _top_level_imports(tree: ast.Module) -> list[ast.stmt]:
    """Statements run when the module is imported: the body, less `if TYPE_CHECKING:`
    blocks; functions and classes' methods are not entered."""
    out: list[ast.stmt] = []
    todo = list(tree.body)
    while todo:
        n = todo.pop()
        if isinstance(n, ast.If) and "TYPE_CHECKING" in ast.unparse(n.test):
            todo += n.orelse
        elif isinstance(n, (ast.If, ast.Try, ast.With)):
            todo += [*n.body, *getattr(n, "orelse", []), *getattr(n, "finalbody", [])]
            for h in getattr(n, "handlers", []):
                todo += h.body
        elif isinstance(n, ast.ClassDef):
            todo += [b for b in n.body if not isinstance(b, FUNCTIONS)]
        elif isinstance(n, (ast.Import, ast.ImportFrom)):
            out.append(n)
    return out


def _targets(mod: str, node, is_pkg: bool, known: dict) -> set[str]:
    """The project modules an import statement runs: the named module, each package on
    its way (their __init__ runs first) and, for `from pkg import name`, a submodule."""
    names = (
        [a.name for a in node.names]
        if isinstance(node, ast.Import)
        else [_absolute(mod, node, is_pkg)]
    )
    out = set()
    for name in names:
        parts = name.split(".")
        out |= {".".join(parts[:i]) for i in range(1, len(parts) + 1)}
        if isinstance(node, ast.ImportFrom):
            out |= {f"{name}.{a.name}" for a in node.names}
    # a module's own packages are already being imported when it runs: not an edge
    return {t for t in out if t in known and t != mod and not mod.startswith(t + ".")}


def import_graph() -> dict[str, set[str]]:
    """Module -> the project modules it imports, at import time or inside a function (a
    cycle closed by a function-level import is still a cycle; only `TYPE_CHECKING`
    imports, which never run, are left out)."""
    known = modules()
    graph = {}
    for mod, path in known.items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        is_pkg = path.name == "__init__.py"
        lazy = [n for f in _functions(tree) for n in ast.walk(f) if isinstance(n, IMPORTS)]
        graph[mod] = set()
        for node in _top_level_imports(tree) + lazy:
            graph[mod] |= _targets(mod, node, is_pkg, known)
    return graph


def _functions(tree: ast.Module) -> list[ast.AST]:
    return [n for n in ast.walk(tree) if isinstance(n, FUNCTIONS)]


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def function_imports() -> list[tuple[str, int, str]]:
    """(file, line, module) of every import statement inside a function."""
    out = []
    for mod, path in modules().items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        is_pkg = path.name == "__init__.py"
        for fn in ast.walk(tree):
            if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            for n in ast.walk(fn):
                if isinstance(n, ast.Import):
                    out += [(str(path.relative_to(ROOT)), n.lineno, a.name) for a in n.names]
                elif isinstance(n, ast.ImportFrom):
                    out.append((str(path.relative_to(ROOT)), n.lineno, _absolute(mod, n, is_pkg)))
    return sorted(set(out))


def test_the_cycle_finder_finds_a_cycle():
    g = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert cycles(g) == [["a", "b", "c"]]


def test_no_import_cycles():
    assert cycles(import_graph()) == []
