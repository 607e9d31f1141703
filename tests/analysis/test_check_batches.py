"""`cfsm check --requests` answers every line, in order, whatever a line does: a line
that is not JSON, a bad constraint or a library's exception becomes that line's error answer
and the file goes on; no valid instance of the JSON-Schema test suite gets an `internal`
answer on any backend. Tokenizer only: a byte-level BPE trained here
(cfsm.bench.tiny_models), so every backend indexes a small vocabulary."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from cfsm.cli import main
from engine.backends import BACKENDS

SUITE = Path(__file__).resolve().parents[3] / "shared/bench-data/json-schema-test-suite"
SUITE = SUITE / "draft2020-12"
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory) -> str:
    from cfsm.bench.tiny_models import build_model

    return str(build_model(tmp_path_factory.mktemp("tiny") / "byte_level"))


def run_check(capsys, model: str, lines: list[str], tmp_path) -> tuple[int, list[dict], str]:
    f = tmp_path / "checks.jsonl"
    f.write_text("\n".join(lines) + "\n", encoding="utf-8")
    rc = main(["check", "--model", model, "--requests", str(f)])
    out = capsys.readouterr()
    return rc, [json.loads(x) for x in out.out.splitlines()], out.err


def test_every_line_is_answered_in_order(capsys, tiny_model, tmp_path):
    good = json.dumps({"regex": "[0-9]+", "text": "12"})
    lines = [
        good,
        json.dumps({"regex": "[0-9]+", "text": "ab"}),
        '{"regex": "[0-9]+", "text"',  # not JSON
        json.dumps({"regex": "(abc", "text": "12"}),  # invalid regex
        json.dumps(["not", "an", "object"]),
        json.dumps({"regex": "[0-9]+", "text": 5}),  # text not a string
        json.dumps({"regex": "[0-9]+", "text": "1", "backend": "nope"}),
        json.dumps({"regex": "[0-9]+", "text": "99"}),
    ]
    rc, out, err = run_check(capsys, tiny_model, lines, tmp_path)
    assert len(out) == len(lines)  # one answer a line, to the last
    assert out[0]["accepted"] and not out[1]["accepted"] and out[7]["accepted"]
    assert out[7]["text"] == "99"  # in input order
    kinds = [o["error"]["kind"] for o in out[2:7]]
    assert kinds == [
        "invalid_input",
        "invalid_regex",
        "invalid_input",
        "invalid_input",
        "unknown_backend",
    ]
    assert ":3: not JSON" in out[2]["error"]["message"]
    assert rc == 2 and "5 of 8 checks failed" in err


def suite_lines() -> list[str]:
    """Every instance of the suite (draft 2020-12, optional formats included) as a check
    line for all four backends."""
    lines = []
    for path in sorted(SUITE.rglob("*.json")):
        for group in json.loads(path.read_text(encoding="utf-8")):
            for t in group["tests"]:
                text = json.dumps(t["data"], ensure_ascii=False)
                line = {"schema": group["schema"], "text": text, "backend": "all"}
                lines.append(json.dumps(line))
    return lines


def test_no_suite_instance_gets_an_internal_answer_on_any_backend(tiny_model, tmp_path):
    """All 2,225 instances x 4 backends through `cfsm check` (about 2.5 min). A compile
    limit of 3 s (not 20) keeps the untyped numeric-bound and hostname/email schemas that
    outlines-core indexes slowly to a `compile_timeout` answer: an answer, never
    `internal`."""
    if not SUITE.is_dir():
        pytest.skip("../shared/bench-data/json-schema-test-suite is not present")
    lines = suite_lines()
    assert len(lines) > 2000
    f = tmp_path / "suite.jsonl"
    f.write_text("\n".join(lines) + "\n", encoding="utf-8")
    cmd = [sys.executable, "-m", "cfsm", "check", "--model", tiny_model, "--requests", str(f)]
    env = {**os.environ, "CFSM_COMPILE_TIMEOUT_S": "3"}
    done = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, encoding="utf-8")
    # str.splitlines would also split at U+2028 inside a JSON string
    out = [json.loads(x) for x in done.stdout.split("\n") if x]
    assert done.returncode == 2  # the suite's unsupported keywords are error answers
    assert len(out) == len(lines) * len(BACKENDS)
    assert sum("accepted" in o for o in out) > len(out) // 3  # checked, not only refused
    internal = [o for o in out if o.get("error", {}).get("kind") == "internal"]
    assert internal == []


def test_a_string_with_escaped_quotes_is_checked_not_an_internal_error(
    capsys, tiny_model, tmp_path
):
    """The JSON-Schema test suite's quoted-local-part email (a valid instance): the limit
    finder scanned back to an escaped quote and failed with a JSONDecodeError on fsm,
    outlines and llguidance."""
    data = '"very.(),:;<>[]\\".VERY.\\"very@\\\\ \\"very\\".unusual"@strange.example.com'
    line = {"schema": {"type": "string", "format": "email"}, "text": json.dumps(data)}
    _, out, _ = run_check(capsys, tiny_model, [json.dumps({**line, "backend": "all"})], tmp_path)
    by = {o["backend"]: o for o in out}
    for b in ("fsm", "outlines", "llguidance"):
        assert "accepted" in by[b], by[b]


def test_a_refusal_names_the_number_range_or_the_whitespace_policy(capsys, tiny_model, tmp_path):
    """Issue 46: 3601 against maximum 3600 answered only "expected ',', '0', '}'", and
    pretty-printed JSON only "expected '\"'"; the answer names what refused them."""
    schema = {
        "type": "object",
        "properties": {"n": {"type": "integer", "minimum": 0, "maximum": 3600}},
        "required": ["n"],
    }
    lines = [
        json.dumps({"schema": schema, "text": '{"n":3601}', "backend": "fsm"}),
        json.dumps({"schema": schema, "text": '{\n  "n": 1\n}', "backend": "fsm"}),
        json.dumps({"schema": schema, "text": '{"n": 1}', "backend": "fsm"}),
    ]
    _, out, _ = run_check(capsys, tiny_model, lines, tmp_path)
    assert out[0]["limit"] == "the number would leave minimum 0, maximum 3600 of /properties/n"
    assert out[1]["limit"].startswith("the compact whitespace policy writes no whitespace")
    assert "no policy allows newlines" in out[1]["limit"]
    assert "compact" in out[2]["limit"] and "flexible allows a space" in out[2]["limit"]


def test_a_refusal_names_lower_bounds_and_array_lengths(capsys, tiny_model, tmp_path):
    """Issue 46, the bounds besides maxLength and a number's next digit: a number that ends
    below its minimum, an array closed before minItems or going on past maxItems, a string
    closed before minLength; the Test strings panel shows the same words."""
    from viz.highlight import test_strings_html

    props = {
        "n": {"type": "integer", "minimum": 10},
        "a": {"type": "array", "items": {"type": "integer"}, "minItems": 2, "maxItems": 3},
        "s": {"type": "string", "minLength": 3},
    }
    # each text: the part the schema allows, then the refused rest
    cut = [('{"n":5', "}"), ('{"n":10,"a":[1', "]}"), ('{"n":10,"a":[1,2,3', ",4]}"),
           ('{"n":10,"a":[1,2],"s":"ab', '"}')]  # fmt: skip
    texts = [a + b for a, b in cut]
    schema = {"type": "object", "properties": props, "required": list(props)}
    lines = [json.dumps({"schema": schema, "text": t, "backend": "fsm"}) for t in texts]
    _, out, _ = run_check(capsys, tiny_model, lines, tmp_path)
    assert [o["rejected_at"] for o in out] == [len(a) for a, _ in cut]
    assert [o["limit"] for o in out] == [
        "the number 5 is outside minimum 10 of /properties/n",
        "minItems 2 of /properties/a not reached (1 item so far)",
        "maxItems 3 of /properties/a reached",
        "minLength 3 of /properties/s not reached (2 characters so far)",
    ]
    shown = test_strings_html([{**o, "text": t} for o, t in zip(out, texts, strict=True)])
    assert "minItems 2 of /properties/a not reached" in shown
