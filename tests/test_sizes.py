"""Files stay small enough to read: none over 600 lines in engine, viz, app or cfsm (split
a file that grows past it by what it holds; docs/architecture.md lists where)."""

from pathlib import Path

MAX_LINES = 600
ROOT = Path(__file__).resolve().parents[1]


def test_no_source_file_is_over_600_lines():
    long = {
        str(p.relative_to(ROOT)): n
        for folder in ("engine", "viz", "app", "cfsm")
        for p in (ROOT / folder).rglob("*")
        if p.suffix in (".py", ".js")
        and (n := len(p.read_text(encoding="utf-8").splitlines())) > MAX_LINES
    }
    assert long == {}
