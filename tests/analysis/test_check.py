"""`cfsm check`: does a constraint accept a text, per backend (tokenizer only, no weights)."""

import json

import pytest

from cfsm.cli import main
from engine.backends import BACKENDS

# no weights are used, but the embedded tokenizer comes from the converted model folder
# (the first run converts the GGUF), so these count as model tests
pytestmark = pytest.mark.model


def run(capsys, *argv):
    rc = main(["check", *argv])
    return rc, [json.loads(x) for x in capsys.readouterr().out.splitlines()]


def test_regex_verdicts_name_the_place_and_what_was_allowed(capsys):
    rc, out = run(
        capsys,
        "--regex",
        "[0-9]{3}-[0-9]{4}",
        "--text",
        "555-1234",
        "--text",
        "555-12a4",
        "--text",
        "555-12",
        "--text",
        "ü55",
    )
    assert rc == 0
    ok, bad, short, wide = out
    assert ok["accepted"] and ok["prefix_ok"] and ok["rejected_at"] is None
    assert (
        not bad["accepted"]
        and not bad["prefix_ok"]
        and bad["rejected_at"] == 6
        and bad["expected"] == ["[0-9]"]
    )
    assert not short["accepted"] and short["prefix_ok"] and short["expected"] == ["[0-9]"]
    assert (
        wide["rejected_at"] == 0
    )  # a byte offset: "ü" is two bytes, and it is the first character


@pytest.mark.parametrize("backend", BACKENDS)
def test_every_backend_gives_its_own_verdict(capsys, backend):
    rc, (good, bad) = run(
        capsys,
        "--regex",
        r"The answer is (yes|no)\.",
        "--backend",
        backend,
        "--text",
        "The answer is yes.",
        "--text",
        "The answer is maybe.",
    )
    assert rc == 0 and good["backend"] == backend and good["accepted"]
    assert not bad["accepted"] and bad["rejected_at"] == len("The answer is ")


def test_every_backend_accepts_past_an_accepting_state(capsys):
    """outlines-core 0.2.x alone refuses `1.5` for `[0-9]+(\\.[0-9]+)?` (it drops tokens that
    leave an accepting state); the adapter's end marker fixes that, so all four agree."""
    rc, out = run(
        capsys, "--regex", r"[0-9]+(\.[0-9]+)?", "--backend", "all", "--text", "1.5", "--text", "1."
    )
    assert rc == 0
    full = {o["backend"]: o for o in out if o["text"] == "1.5"}
    part = {o["backend"]: o for o in out if o["text"] == "1."}
    assert set(full) == set(part) == set(BACKENDS)
    assert all(o["accepted"] and not o["warnings"] for o in full.values())
    assert all(
        not o["accepted"] and o["prefix_ok"] and o["rejected_at"] is None for o in part.values()
    )


def test_native_schema_bounds_and_a_bad_line_in_a_requests_file(capsys, tmp_path):
    schema = {
        "type": "object",
        "properties": {"qty": {"type": "integer", "minimum": 1, "maximum": 99}},
        "required": ["qty"],
    }
    f = tmp_path / "checks.jsonl"
    f.write_text(
        json.dumps({"schema": schema, "backend": "xgrammar", "text": '{"qty":100}'})
        + "\n"
        + json.dumps({"regex": "(?<=a)b", "text": "b"})
        + "\n"
        + json.dumps({"schema": schema, "backend": "xgrammar", "text": '{"qty":12}'})
        + "\n"
    )
    rc, (over, err, fine) = run(capsys, "--requests", str(f))
    assert rc == 2  # one line failed to compile; the others were checked
    assert (
        not over["accepted"]
        and over["rejected_at"] == len('{"qty":10')
        and over["expected"] == ["'}'"]  # one character, quoted (a space would be `' '`)
    )
    assert err["error"]["kind"] == "unsupported_feature"
    assert fine["accepted"]


def test_check_without_a_text_is_a_clear_error(capsys):
    rc, (out,) = run(capsys, "--regex", "a")
    assert rc == 2 and out["error"]["kind"] == "invalid_input"


def test_spec_flag_and_requests_field_read_the_schema_as_json_schema_does(capsys, tmp_path):
    schema = json.dumps(
        {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}
    )
    rc, (closed,) = run(capsys, "--schema", schema, "--text", '{"a":1.0,"b":2}')
    rc2, (opened,) = run(capsys, "--schema", schema, "--spec", "--text", '{"a":1.0,"b":2}')
    assert rc == rc2 == 0 and not closed["accepted"] and opened["accepted"]
    f = tmp_path / "checks.jsonl"
    f.write_text(
        json.dumps(
            {
                "schema": json.loads(schema),
                "spec": True,
                "backend": "xgrammar",
                "text": '{"a":1,"b":2}',
            }
        )
    )
    rc, (native,) = run(capsys, "--requests", str(f))
    assert rc == 0 and native["accepted"]  # xgrammar without strict mode


def test_a_text_past_a_strings_maxlength_names_the_bound_and_quotes_what_was_expected(capsys):
    schema = {"type": "object", "properties": {"title": {"type": "string", "maxLength": 5}}}
    rc, (out,) = run(
        capsys,
        "--schema",
        json.dumps(schema),
        "--whitespace",
        "flexible",
        "--text",
        '{"title": "abcdefg"}',
    )
    assert rc == 0 and out["rejected_at"] == len('{"title": "abcde')
    assert out["limit"] == "maxLength 5 of /properties/title reached"
    assert out["expected"] == ["'\"'"]
    rc, (gap,) = run(
        capsys, "--schema", json.dumps(schema), "--whitespace", "flexible", "--text", '{"title":x'
    )
    assert "' '" in gap["expected"]  # a space, quoted: not a bare blank


def test_expected_names_every_allowed_character_as_one_class(capsys):
    """An email's first character: the automaton splits the letters into the classes it
    tells apart; the list named 8 of them (c, d, e, g, m, ...) and left out n, o, r, t,
    which are allowed. Now one class in ranges, a literal `-` escaped."""
    rx = r"(help|info|no-reply|team)@example\.com|[a-z0-9._%+-]+@mail\.org"
    rc, out = run(capsys, "--regex", rx, "--text", "Help@example.com", "--backend", "fsm")
    assert rc == 0 and out[0]["rejected_at"] == 0
    assert out[0]["expected"] == ["[%+\\-.0-9_a-z]"]


def test_a_native_backends_token_list_says_how_many_more(capsys):
    # a grammar has no character automaton: the verdict lists the tokens llguidance allows
    rc, out = run(capsys, "--grammar", "start: /[a-z]+/", "--text", "A", "--backend", "llguidance")
    assert rc == 0
    listed = out[0]["expected"]
    assert len(listed) == 9 and listed[-1].startswith("\u2026 ") and listed[-1].endswith(" more")
    assert int(listed[-1].split()[1]) > 100  # every token of letters is allowed
