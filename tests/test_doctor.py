"""The schema doctor: right numbers, right causes, useful what-ifs."""

import json

import pytest

from engine.constraint import Constraint
from engine.decode import GenerateRequest
from engine.doctor import _json_pointer_at, diagnose

ORDER = {
    "type": "object",
    "properties": {
        "orderId": {"type": "integer"},
        "status": {"type": "string", "enum": ["pending", "shipped", "delivered"]},
        "items": {"type": "array", "items": {"type": "string", "maxLength": 8}, "maxItems": 3},
    },
    "required": ["orderId", "status", "items"],
    "additionalProperties": False,
}


def doc(ctx, constraint, **kw):
    return diagnose(constraint, ctx.tokenizer, ctx.vocab.token_bytes, **kw)


def test_flexible_whitespace_is_the_top_cause_and_compact_fixes_it(ctx):
    rep = doc(ctx, Constraint("schema", json.dumps(ORDER), "flexible"), n=6)
    causes = {c["cause"]: c for c in rep["causes"]}
    assert rep["causes"][0]["cause"] == "flexible_whitespace"
    assert causes["flexible_whitespace"]["share"] > 0.3
    assert "compact" in causes["flexible_whitespace"]["suggestion"]
    wi = next(w for w in rep["what_if"] if w["change"] == "compact separators")
    assert wi["ideal_reduction_after"] > wi["ideal_reduction_before"] * 1.3


def test_optional_properties_point_at_their_object(ctx):
    schema = {"type": "object", "properties": {"a": {"type": "boolean"}, "b": {"type": "boolean"}}}
    rep = doc(ctx, Constraint("schema", json.dumps(schema), "compact"), n=8)
    causes = {c["cause"]: c for c in rep["causes"]}
    assert "optional_or_order" in causes
    assert "/" in causes["optional_or_order"]["places"]
    wi = next(w for w in rep["what_if"] if w["change"].startswith("required"))
    assert wi["ideal_reduction_after"] > wi["ideal_reduction_before"]


def test_character_regex_causes_and_places(ctx, character_regex):
    rep = doc(ctx, Constraint("regex", character_regex), n=6)
    causes = {c["cause"]: c for c in rep["causes"]}
    assert {"free_text", "enum_alternatives", "numbers"} <= set(causes)
    # places are spans of the regex source
    place = causes["enum_alternatives"]["places"][0]
    assert place.startswith("regex[")
    a, b = (int(x) for x in place[6:-1].split(":"))
    assert "(" in character_regex[a - 2 : b]
    assert 2.5 < rep["ideal_reduction"] < 8
    assert abs(sum(c["share"] for c in rep["causes"]) - 1) < 0.01


def test_json_pointer_scanner():
    text = '{"a":{"b":[1,{"c":"x'
    assert _json_pointer_at(text, len(text)) == "/properties/a/properties/b/items/properties/c"
    assert _json_pointer_at('{"a":1,', 7) == "/"


@pytest.mark.model
@pytest.mark.parametrize("which", ["character", "schema"])
def test_doctor_agrees_with_what_jump_achieves(engine, paper_bench, character_regex, which):
    if which == "character":
        c = Constraint("regex", character_regex)
        prompt = paper_bench["character"]["prompt_template"].format(name="Draco Malfoy")
    else:
        c = Constraint("schema", json.dumps(ORDER), "spaced")
        prompt = "Write an order as JSON: id 7, shipped, with a book and a pen."
    tr = engine.generate(GenerateRequest(prompt=prompt, constraint=c, mode="jump", max_new_tokens=256))
    assert tr["totals"]["finished"]
    rep = doc(engine.ctx, c, samples=[tr["text"]])
    assert rep["samples"]["source"] == "model"
    predicted = rep["total_tokens"] / rep["model_tokens"]
    # every model-chosen token is fed in one pass, except the last one, which completes
    # the match; the prompt prefill takes its place in the count
    achieved = tr["totals"]["output_tokens"] / tr["totals"]["forward_passes"]
    assert abs(predicted - achieved) / achieved <= 0.10, (predicted, achieved, tr["totals"])


def test_doctor_cli(capsys, engine):
    from engine.cli import main

    assert main(["doctor", "--schema", json.dumps(ORDER), "--whitespace", "flexible", "--samples", "4", "--json"]) == 0
    rep = json.loads(capsys.readouterr().out)
    assert rep["causes"] and rep["what_if"] and rep["ideal_reduction"] > 1
    assert main(["doctor", "--regex", "(yes|no)", "--samples", "3"]) == 0
    assert "Ideal forward-pass reduction" in capsys.readouterr().out
