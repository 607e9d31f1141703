"""Every shell command shown in README.md and docs/*.md is checked (docs/history/ is a
record and is exempt).

* Fenced blocks whose info string is `sh`, `bash` or `console` hold commands: lines ending
  in `\\` are joined; blank lines and lines starting with `#` (comments, shown output) are
  skipped; a leading `$ ` prompt is dropped.
* Every `cfsm` command (`cfsm`, `.venv/bin/cfsm`, `python -m cfsm`, `.venv/bin/python -m
  cfsm`, after any `VAR=value` assignments) must parse with the real parser.
* A block right after `<!-- test: run -->` is executed: each command must exit 0, and where
  the line right after a command is a `# {` or `# [` comment, that JSON (continued over the
  following comment lines) must equal the command's first line of output.
* A block right after `<!-- test: server -->` (shell or Python) runs against `cfsm serve`
  on the embedded model (the session's test server, whose URL replaces
  `http://127.0.0.1:7860`): Python code must exit 0; `cfsm` and `curl` commands too, and a
  `curl` command answers JSON that equals its output comment, or without one holds no
  `error`.
* Any other command must sit in a block right after `<!-- illustrative -->` (or
  `<!-- illustrative: reason -->`).
* Every code block of docs/api.md is run (`test: run` or `test: server`), or is output a
  test compares with what the code writes (`<!-- test: checked by tests/PATH.py -->`, a
  test file that names the doc).
* Commands run in a fresh folder holding the small FIXTURES files, and `docs/examples/` and
  `tests/data/` as in the checkout, so a command may name a file by its path there.
* README.md has at most 200 lines, the docs it lists exist, and relative links resolve.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from app.presets import ORDER_SCHEMA, PERSON_SCHEMA, TOOLS  # the docs show the presets'
from cfsm.cli import bench_argv, build_parser

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
DOCS = ROOT / "docs"
CHECKED = [README, *sorted(DOCS.glob("*.md"))]
LINKED = [*CHECKED, *sorted((DOCS / "history").glob("*.md"))]

SHELL_INFO = {"sh", "bash", "console", "shell"}
RUN_MARK = re.compile(r"^<!--\s*test:\s*run\s*-->$")
SERVER_MARK = re.compile(r"^<!--\s*test:\s*server\s*-->$")
CHECKED_MARK = re.compile(r"^<!--\s*test:\s*checked by\s+(\S+)\s*-->$")
ILLUSTRATIVE_MARK = re.compile(r"^<!--\s*illustrative(\s*:.*)?\s*-->$")
SERVED_URL = "http://127.0.0.1:7860"  # the server the docs call; the test server's URL replaces it
EVERY_EXAMPLE_RUNS = [DOCS / "api.md"]  # docs whose every code block is run
REPO_PATHS = ("docs/examples", "tests/data")  # files the commands may name by their path
ENV_ASSIGN = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")
OPERATORS = {"&&", "||", ";", "|"}
RUN_TIMEOUT_S = 300

# Small input files the executed commands may name (written into their working folder).
INVOICE = {
    "type": "object",
    "properties": {
        "id": {"type": "string", "maxLength": 8},
        "lines": {
            "type": "array",
            "minItems": 1,
            "maxItems": 3,
            "items": {
                "type": "object",
                "properties": {
                    "sku": {"type": "string", "pattern": "^[A-Z]{3}-[0-9]{3}$"},
                    "qty": {"type": "integer", "minimum": 1, "maximum": 99},
                    "price": {"type": "number", "minimum": 0},
                },
                "required": ["sku", "qty", "price"],
            },
        },
    },
    "required": ["id", "lines"],
}
PERSON, ORDER = PERSON_SCHEMA, ORDER_SCHEMA  # the presets' schemas
ANSWER = {
    "type": "object",
    "properties": {"answer": {"type": "integer", "minimum": 0, "maximum": 100}},
    "required": ["answer"],
}
FIXTURES = {
    "invoice.json": json.dumps(INVOICE),
    "person.json": json.dumps(PERSON),
    "order.json": json.dumps(ORDER),
    "answer.json": json.dumps(ANSWER),
    "tools.json": json.dumps(TOOLS),
    "checks.jsonl": json.dumps({"regex": "[0-9]+", "backend": "fsm", "text": "42"}) + "\n",
    "requests.jsonl": json.dumps({"prompt": "A year?", "regex": "(19|20)[0-9]{2}"}) + "\n",
}


@dataclass
class Command:
    line: str  # the command as written (continuations joined)
    lineno: int  # where it starts in its file
    expected: str | None = None  # the output comment after it, if any


@dataclass
class Block:
    path: Path
    lineno: int  # the opening fence's line
    marker: str  # "run", "server", "illustrative" or ""
    info: str = ""  # the fence's language: sh, python, json, ...
    checked_by: str = ""  # the test file that compares it with the code's output
    body: list[str] = field(default_factory=list)
    commands: list[Command] = field(default_factory=list)  # a shell block's

    @property
    def where(self) -> str:
        return f"{self.path.relative_to(ROOT)}:{self.lineno}"


def marker_of(line: str) -> tuple[str, str]:
    """The marker a block's preceding line names, and the test file of `checked by`."""
    for name, mark in (("run", RUN_MARK), ("server", SERVER_MARK)):
        if mark.match(line):
            return name, ""
    if m := CHECKED_MARK.match(line):
        return "checked", m.group(1)
    return ("illustrative" if ILLUSTRATIVE_MARK.match(line) else ""), ""


def code_blocks(path: Path) -> list[Block]:
    """The fenced blocks of a Markdown file, each with its marker (a shell block's
    commands parsed)."""
    lines = path.read_text(encoding="utf-8").splitlines()
    blocks: list[Block] = []
    i = 0
    while i < len(lines):
        m = re.match(r"^(\s*)(`{3,}|~{3,})\s*([^\s`]*)", lines[i])
        if not m:
            i += 1
            continue
        fence, info = m.group(2), m.group(3).lower()
        j = i + 1
        while j < len(lines) and not lines[j].strip().startswith(fence):
            j += 1
        prev = next((lines[k].strip() for k in range(i - 1, -1, -1) if lines[k].strip()), "")
        marker, checked_by = marker_of(prev)
        block = Block(path, i + 1, marker, info, checked_by, lines[i + 1 : j])
        if info in SHELL_INFO:
            block.commands = commands_of(block.body, i + 2)
        blocks.append(block)
        i = j + 1
    return blocks


def shell_blocks(path: Path) -> list[Block]:
    """The shell blocks of a Markdown file, each with its marker and commands."""
    return [b for b in code_blocks(path) if b.info in SHELL_INFO]


def commands_of(body: list[str], first_lineno: int) -> list[Command]:
    out: list[Command] = []
    k = 0
    while k < len(body):
        raw = body[k].strip()
        start = k
        if not raw or raw.startswith("#"):
            k += 1
            continue
        while raw.endswith("\\") and k + 1 < len(body):
            k += 1
            raw = raw[:-1].rstrip() + " " + body[k].strip()
        if raw.startswith("$ "):
            raw = raw[2:]
        cmd = Command(raw, first_lineno + start)
        comment: list[str] = []
        n = k + 1
        while n < len(body) and body[n].strip().startswith("#"):
            comment.append(body[n].strip().lstrip("#").strip())
            n += 1
        if comment and comment[0][:1] in "{[":
            cmd.expected = expected_json(comment)
        out.append(cmd)
        k += 1
    return out


def expected_json(comment: list[str]) -> str | None:
    """The shortest run of comment lines from the first that is one JSON value."""
    for n in range(1, len(comment) + 1):
        text = " ".join(comment[:n])
        try:
            json.loads(text)
        except ValueError:
            continue
        return text
    return " ".join(comment)  # not JSON: the comparison fails and shows it


def split_command(line: str) -> list[list[str]]:
    """The simple commands of a line (split at && || ; |), each as its words."""
    words = shlex.split(line, comments=True)
    parts: list[list[str]] = [[]]
    for w in words:
        if w in OPERATORS:
            parts.append([])
        else:
            parts[-1].append(w)
    return [p for p in parts if p]


def cfsm_argv(words: list[str]) -> tuple[dict[str, str], list[str]] | None:
    """(environment assignments, arguments after the program) when the words run cfsm."""
    env: dict[str, str] = {}
    i = 0
    while i < len(words) and ENV_ASSIGN.match(words[i]):
        name, value = words[i].split("=", 1)
        env[name] = value
        i += 1
    rest = words[i:]
    if not rest:
        return None
    prog = rest[0]
    if prog in ("cfsm", ".venv/bin/cfsm"):
        return env, rest[1:]
    if Path(prog).name.startswith("python") and rest[1:3] == ["-m", "cfsm"]:
        return env, rest[3:]
    return None


ALL_BLOCKS = [b for path in CHECKED for b in shell_blocks(path)]
RUN_BLOCKS = [b for b in ALL_BLOCKS if b.marker == "run"]
SERVER_BLOCKS = [b for path in CHECKED for b in code_blocks(path) if b.marker == "server"]


def test_readme_is_short():
    n = len(README.read_text(encoding="utf-8").splitlines())
    assert n <= 200, f"README.md has {n} lines; at most 200 (move detail to docs/)"


def test_the_docs_the_readme_names_exist():
    text = README.read_text(encoding="utf-8")
    named = set(re.findall(r"docs/[\w./-]+?\.md", text))
    assert named, "README.md names no docs/*.md file"
    missing = sorted(n for n in named if not (ROOT / n).is_file())
    assert not missing, f"README.md names docs that do not exist: {missing}"


def heading_slugs(path: Path) -> set[str]:
    """GitHub-style anchors of a Markdown file's headings."""
    slugs: set[str] = set()
    in_code = False
    for line in path.read_text(encoding="utf-8").splitlines():
        if re.match(r"^\s*(`{3,}|~{3,})", line):
            in_code = not in_code
            continue
        m = re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
        if m and not in_code:
            title = re.sub(r"[`*]|<[^>]+>", "", m.group(1)).lower()
            slug = re.sub(r"[^\w\- ]", "", title).replace(" ", "-")
            slugs.add(slug)
    return slugs


def links_of(path: Path) -> list[str]:
    """Link targets outside code blocks and code spans."""
    text = re.sub(r"(?ms)^\s*(`{3,}|~{3,}).*?^\s*\1[^\n]*$", "", path.read_text(encoding="utf-8"))
    text = re.sub(r"(`+)(?:(?!\1).)+?\1", "", text)
    return re.findall(r"!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)", text)


@pytest.mark.parametrize("path", LINKED, ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_resolve(path: Path):
    broken = []
    for target in links_of(path):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto:
            continue
        file_part, _, fragment = target.partition("#")
        dest = (path.parent / file_part).resolve() if file_part else path
        if not dest.exists():
            broken.append(target)
        elif fragment and dest.suffix == ".md" and fragment not in heading_slugs(dest):
            broken.append(f"{target} (no such heading)")
    assert not broken, f"{path.relative_to(ROOT)}: broken links: {broken}"


def test_every_cfsm_command_parses():
    parser = build_parser()
    bad = []
    for block in ALL_BLOCKS:
        for cmd in block.commands:
            for words in split_command(cmd.line):
                found = cfsm_argv(words)
                if found is None:
                    continue
                try:
                    parser.parse_args(bench_argv(found[1]))
                except SystemExit:
                    bad.append(f"{block.path.relative_to(ROOT)}:{cmd.lineno}: {cmd.line}")
    assert not bad, "commands the cfsm parser refuses:\n" + "\n".join(bad)


def test_unmarked_blocks_hold_no_commands():
    """A command is either executed (a run block) or marked illustrative."""
    unmarked = [
        f"{block.path.relative_to(ROOT)}:{cmd.lineno}: {cmd.line}"
        for block in ALL_BLOCKS
        if not block.marker
        for cmd in block.commands
    ]
    assert not unmarked, (
        "commands in blocks neither run by this test nor marked <!-- illustrative -->:\n"
        + "\n".join(unmarked)
    )


def test_the_readme_and_the_cli_reference_each_run_a_block():
    have = {b.path for b in RUN_BLOCKS}
    assert README in have and DOCS / "cli.md" in have


def python_path() -> str:
    """This checkout first, so `-m cfsm` runs it from any working folder."""
    rest = os.environ.get("PYTHONPATH")
    return str(ROOT) + (os.pathsep + rest if rest else "")


def work_folder(tmp_path: Path) -> Path:
    """A fresh folder with the FIXTURES files and REPO_PATHS linked as in the checkout."""
    for name, text in FIXTURES.items():
        (tmp_path / name).write_text(text, encoding="utf-8")
    for rel in REPO_PATHS:
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).symlink_to(ROOT / rel, target_is_directory=True)
    return tmp_path


def run_cfsm(words: list[str], cwd: Path, where: str) -> subprocess.CompletedProcess:
    """A cfsm command (its words) run from this checkout; it must exit 0."""
    found = cfsm_argv(words)
    assert found is not None, f"{where}: only cfsm commands are run: {shlex.join(words)}"
    env_extra, argv = found
    return _run_checked(["-m", "cfsm", *argv], cwd, f"{where}: `{shlex.join(words)}`", env_extra)


def _run_checked(
    args: list[str], cwd: Path, what: str, env_extra: dict | None = None
) -> subprocess.CompletedProcess:
    """This checkout's Python with `args`; it must exit 0 (else its output is shown)."""
    proc = subprocess.run(
        [sys.executable, *args],
        cwd=cwd,
        env={**os.environ, "PYTHONPATH": python_path(), **(env_extra or {})},
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT_S,
    )
    assert proc.returncode == 0, (
        f"{what} exited {proc.returncode}\n"
        f"stdout: {proc.stdout[-2000:]}\nstderr: {proc.stderr[-3000:]}"
    )
    return proc


def first_json_line(proc: subprocess.CompletedProcess):
    first = proc.stdout.splitlines()[0] if proc.stdout.strip() else ""
    return json.loads(first)


@pytest.mark.parametrize("block", RUN_BLOCKS, ids=lambda b: b.where)
def test_run_block(block: Block, tmp_path: Path):
    cwd = work_folder(tmp_path)
    for cmd in block.commands:
        where = f"{block.path.relative_to(ROOT)}:{cmd.lineno}"
        parts = split_command(cmd.line)
        assert len(parts) == 1, f"{block.where}: a run block holds simple commands: {cmd.line}"
        proc = run_cfsm(parts[0], cwd, where)
        if cmd.expected is not None:
            got = first_json_line(proc)
            assert got == json.loads(cmd.expected), (
                f"{where}: `{cmd.line}` printed\n{json.dumps(got)}\nthe docs say\n{cmd.expected}"
            )


def test_every_example_of_the_api_doc_runs():
    blocks = [b for path in EVERY_EXAMPLE_RUNS for b in code_blocks(path)]
    idle = [b.where for b in blocks if b.marker not in ("run", "server", "checked")]
    assert not idle, f"code blocks neither run, run against a server nor checked: {idle}"
    for b in blocks:
        if b.marker == "checked":
            test = ROOT / b.checked_by
            named = test.is_file() and str(b.path.relative_to(ROOT)) in test.read_text()
            assert named, f"{b.where}: {b.checked_by} is not a test file that names the doc"


def run_python(code: str, cwd: Path, where: str) -> None:
    _run_checked(["-c", code], cwd, f"{where}: the Python example")


def run_curl(words: list[str], cmd: Command, cwd: Path, where: str) -> None:
    """A curl command: its JSON answer equals the output comment, or holds no error."""
    proc = subprocess.run(words, cwd=cwd, capture_output=True, text=True, timeout=RUN_TIMEOUT_S)
    assert proc.returncode == 0, f"{where}: `{cmd.line}` exited {proc.returncode}: {proc.stderr}"
    got = first_json_line(proc)
    if cmd.expected is not None:
        assert got == json.loads(cmd.expected), (
            f"{where}: `{cmd.line}` printed\n{json.dumps(got)}\nthe docs say\n{cmd.expected}"
        )
    else:
        assert "error" not in got, f"{where}: `{cmd.line}` answered {got}"


@pytest.mark.model
@pytest.mark.parametrize("block", SERVER_BLOCKS, ids=lambda b: b.where)
def test_server_block(block: Block, tmp_path: Path, app_url: str):
    cwd = work_folder(tmp_path)
    if block.info == "python":
        run_python("\n".join(block.body).replace(SERVED_URL, app_url), cwd, block.where)
        return
    assert block.info in SHELL_INFO, f"{block.where}: a server block is Python or shell"
    for cmd in block.commands:
        where = f"{block.path.relative_to(ROOT)}:{cmd.lineno}"
        parts = split_command(cmd.line.replace(SERVED_URL, app_url))
        assert len(parts) == 1, f"{where}: a server block holds simple commands: {cmd.line}"
        if parts[0][0] == "curl":
            run_curl(parts[0], cmd, cwd, where)
        else:
            run_cfsm(parts[0], cwd, where)
