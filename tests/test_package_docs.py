"""Every package says in its `__init__` what its folder holds (the docs' map relies on it)."""

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_every_package_init_has_a_docstring():
    inits = [
        p for pkg in ("engine", "viz", "app", "cfsm") for p in (ROOT / pkg).rglob("__init__.py")
    ]
    assert len(inits) >= 14
    bare = [
        str(p.relative_to(ROOT)) for p in inits if not ast.get_docstring(ast.parse(p.read_text()))
    ]
    assert bare == []
