"""The schema doctor: right numbers, right causes, useful what-ifs."""

import json

import pytest

from engine.analysis.doctor import WHAT_IF_NOISE, diagnose
from engine.analysis.doctor.places import _json_pointer_at
from engine.constraint import Constraint
from engine.decoding.decoder import GenerateRequest

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
    return diagnose(constraint, ctx.tokenizer, ctx.vocab.token_bytes, **kw).to_json()


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
    # each choice points at the property the output chose next, or at the object it closed
    places = set(causes["optional_or_order"]["places"])
    assert places <= {"/", "/properties/a", "/properties/b"} and places & {
        "/properties/a",
        "/properties/b",
    }
    wi = next(w for w in rep["what_if"] if w["change"].startswith("required"))
    assert wi["ideal_reduction_after"] > wi["ideal_reduction_before"]


TITLE_TAGS = {
    "type": "object",
    "properties": {
        "title": {"type": "string", "maxLength": 30},
        "tags": {"type": "array", "items": {"type": "string", "maxLength": 12}},
    },
    "required": ["title", "tags"],
}


def test_free_text_is_attributed_to_the_string_it_is_in(ctx):
    rep = doc(ctx, Constraint("schema", json.dumps(TITLE_TAGS), "compact"), n=8)
    top = rep["causes"][0]
    assert top["cause"] == "free_text" and top["places"][0] == "/properties/title"
    lengths = next((c for c in rep["causes"] if c["cause"] == "array_lengths"), None)
    assert lengths is None or "/properties/title" not in lengths["places"]


ADVICE_FOR = {  # a cause -> the words of the what-if that applies its advice (free text
    # gets a maxLength only where the samples stay under the schema's own; no what-if turns
    # free text or alternatives into the samples' values: that changes the schema's meaning)
    "numbers": ("minimum/maximum",),
    "array_lengths": ("minItems = maxItems",),
    "optional_or_order": ("required and ordered",),
    "flexible_whitespace": ("compact separators",),
}


def test_each_named_cause_has_a_what_if_applying_its_advice_and_one_helps(ctx):
    """The title/tags schema: free text at /properties/title and the tags' items, arrays of
    free length; the Doctor tries a fixed length on the array, never an enum of what the
    samples wrote on the title (it would change what the schema means), and at least one
    what-if raises the ideal. No cause is listed at a place the schema has no such thing
    (no enum at the title)."""
    rep = doc(ctx, Constraint("schema", json.dumps(TITLE_TAGS), "compact"), n=8)
    changes = [w["change"] for w in rep["what_if"]]
    for c in rep["causes"]:  # one of the advice's forms (a maxLength the samples already
        # reach changes nothing, and is not offered)
        words = ADVICE_FOR.get(c["cause"])
        assert words is None or any(w in ch for w in words for ch in changes), (c, changes)
    assert not any(ch.startswith(("enum of", "const =")) for ch in changes), changes
    assert any(w.get("verdict") == "raises" for w in rep["what_if"]), rep["what_if"]
    alternatives = next((c for c in rep["causes"] if c["cause"] == "enum_alternatives"), None)
    assert alternatives is None or "/properties/title" not in alternatives["places"]


def test_optional_property_choice_points_at_the_property(ctx):
    book = {
        "type": "object",
        "properties": {
            "book": {
                "type": "object",
                "properties": {
                    "name": {"type": "string", "maxLength": 20},
                    "genre": {"enum": ["sf", "crime"]},
                    "tags": {"type": "array", "items": {"enum": ["a", "b"]}, "maxItems": 3},
                },
                "required": ["name", "genre"],
            }
        },
        "required": ["book"],
    }
    rep = doc(ctx, Constraint("schema", json.dumps(book), "compact"), n=8)
    places = next(c for c in rep["causes"] if c["cause"] == "optional_or_order")["places"]
    assert "/properties/book/properties/tags" in places
    assert "/properties/book/properties/genre" not in places  # required: never a choice


def test_what_if_says_whether_it_helps(ctx):
    schema = {
        "type": "object",
        "properties": {
            "t": {"type": "array", "items": {"type": "string", "maxLength": 12}, "maxItems": 4},
            "n": {"type": "integer"},
        },
    }
    rep = doc(ctx, Constraint("schema", json.dumps(schema), "compact"), n=8)
    assert rep["what_if"]
    for w in rep["what_if"]:
        before, after = w["ideal_reduction_before"], w["ideal_reduction_after"]
        clear = abs(after - before) > WHAT_IF_NOISE * before  # beyond the samples' noise
        want = ("lowers" if after < before else "raises") if clear else "does not clearly"
        assert w["verdict"].startswith(want), w
        assert ("not recommended" in w["advice"]) == (want == "lowers")


def test_what_ifs_build_their_automata_through_the_callers_limits(ctx):
    """A changed schema's automaton comes from the caller (the engine: a killable worker
    with a time limit), one refusal is reported on its what-if and the rest still measured,
    and what the doctor's time leaves out says so instead of running on in the server."""
    from engine.errors import CfsmError
    from engine.regex.dfa import build_char_dfa

    asked = []

    def automaton(c, seconds):
        asked.append(seconds)
        if c.spec:  # the other reading: as if it took past the limit
            raise CfsmError("compile_timeout", "building the automaton took longer than 2 s")
        return build_char_dfa(c.regex())

    c = Constraint("schema", json.dumps(ORDER), "flexible")
    rep = doc(ctx, c, n=6, automaton=automaton, what_if_s=60.0)
    by = {w["change"]: w for w in rep["what_if"]}
    assert len(asked) == len(by) and all(0 < s <= 60.0 for s in asked)
    spec = next(w for k, w in by.items() if k.startswith("JSON Schema's own reading"))
    assert spec["error"] == "building the automaton took longer than 2 s"
    assert by["compact separators"]["verdict"] == "raises"
    spent = doc(ctx, c, n=6, automaton=automaton, what_if_s=0.0)
    assert spent["what_if"] and all(
        w["error"] == "not measured: the what-ifs' 0 s were spent" for w in spent["what_if"]
    )


def test_a_what_if_gives_what_diagnosing_the_change_gives(ctx):
    """'compact separators' on a flexible schema predicts what the doctor then reports for
    the compact schema (it measured 1.54x against 1.29x: other documents)."""
    text = json.dumps(TITLE_TAGS)
    rep = doc(ctx, Constraint("schema", text, "flexible"), n=8)
    wi = next(w for w in rep["what_if"] if w["change"] == "compact separators")
    compact = doc(ctx, Constraint("schema", text, "compact"), n=8)
    assert wi["ideal_reduction_after"] == compact["ideal_reduction"]
    assert "the same documents re-serialized" in wi["note"]  # the other reading, given too


def test_doctor_page_marks_the_node_a_cause_points_at():
    from viz.summaries import doctor_md

    rep = {
        "constraint": {"kind": "schema"},
        "fsm": {
            "num_states": 1,
            "jumpable_states": 0,
            "jumpable_share": 0,
            "num_chains": 0,
            "longest_chain": 0,
        },
        "ideal_reduction": 1,
        "total_tokens": 1,
        "model_tokens": 1,
        "samples": {"count": 1, "source": "synthesized", "texts": []},
        "causes": [
            {
                "cause": "free_text",
                "title": "Free-text strings",
                "share": 1,
                "why": "",
                "suggestion": "",
                "places": ["/properties/title"],
            }
        ],
        "token_boundaries": {"share": 0, "title": "x", "suggestion": ""},
        "what_if": [],
    }
    md = doctor_md(rep, json.dumps(TITLE_TAGS))
    marked = md.split("<mark id='doctor-mark'>", 1)[1].split("</mark>", 1)[0]
    assert "maxLength&quot;: 30" in marked and "tags" not in marked


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
    tr = engine.generate(
        GenerateRequest(prompt=prompt, constraint=c, mode="jump", max_new_tokens=256)
    ).to_json()
    assert tr["totals"]["finished"]
    rep = doc(engine.ctx, c, samples=[tr["text"]])
    assert rep["samples"]["source"] == "model"
    predicted = rep["total_tokens"] / rep["model_tokens"]
    # every model-chosen token is fed in one pass, except the last one, which completes
    # the match; the prompt prefill takes its place in the count
    achieved = tr["totals"]["output_tokens"] / tr["totals"]["forward_passes"]
    assert abs(predicted - achieved) / achieved <= 0.10, (predicted, achieved, tr["totals"])


def test_doctor_cli(capsys, compile_engine):
    from cfsm.cli import main

    assert (
        main(
            [
                "doctor",
                "--schema",
                json.dumps(ORDER),
                "--whitespace",
                "flexible",
                "--samples",
                "4",
                "--json",
            ]
        )
        == 0
    )
    rep = json.loads(capsys.readouterr().out)
    assert rep["causes"] and rep["what_if"] and rep["ideal_reduction"] > 1
    assert main(["doctor", "--regex", "(yes|no)", "--samples", "3"]) == 0
    assert "Ideal forward-pass reduction" in capsys.readouterr().out


def test_the_spec_reading_what_if_says_what_open_objects_cost(ctx):
    """Generation closes objects; the doctor measures what JSON Schema's own reading would
    cost, and the way back from it."""
    tagged = {
        "type": "object",
        "properties": {"id": {"const": 7}, "ok": {"type": "boolean"}},
        "required": ["id", "ok"],
    }
    for spec in (
        False,
        True,
    ):  # spec: after `7` a model may write `.0` or another key, so `,"ok":` is no longer forced
        rep = doc(ctx, Constraint("schema", json.dumps(tagged), "compact", spec=spec), n=8)
        w = next(w for w in rep["what_if"] if "reading" in w["change"])
        assert ("JSON Schema's own reading" in w["change"]) == (not spec)
        assert w["verdict"] == ("lowers" if not spec else "raises"), w


def test_the_ideal_as_time_counts_forced_tokens_at_the_runtimes_prefill_cost(ctx):
    """The same passes saved are less time saved where a prefill token is dear (llama.cpp
    on a CPU: a 32-token pass costs about 12 steps) than where it is cheap (PyTorch: about
    2 steps); the report says so in its own line."""
    from engine.analysis.doctor import ideal_time
    from viz.doctor_text import format_report

    cheap = {"step_ms": 50.0, "prefill_ms": {"8": 60.0, "32": 100.0}, "runtime": "transformers"}
    dear = {"step_ms": 12.0, "prefill_ms": {"8": 45.0, "32": 150.0}, "runtime": "llamacpp"}
    a, b = ideal_time(100, 20, cheap), ideal_time(100, 20, dear)
    assert a["ideal_time_reduction"] == pytest.approx(5000 / (20 * 50 + 80 * 50 / 31), abs=0.01)
    assert 1 < b["ideal_time_reduction"] < a["ideal_time_reduction"] < 100 / 20
    rep = doc(ctx, Constraint("schema", json.dumps(ORDER), "compact"), n=4, costs=dear)
    assert rep["time"]["runtime"] == "llamacpp"
    assert 1 <= rep["time"]["ideal_time_reduction"] < rep["ideal_reduction"]
    assert "As decode time on llamacpp: ideal" in format_report(rep)
    assert doc(ctx, Constraint("schema", json.dumps(ORDER)), n=2)["time"] is None


def test_a_schema_whose_shortest_document_is_long_still_gets_samples(ctx):
    """Real schemas' shortest documents run to thousands of characters (a Github schema:
    2,282); the samples may be as long as that needs, not cut at a fixed length and then
    called unsatisfiable."""
    props = {f"required_field_{i:02d}": {"type": "boolean"} for i in range(40)}
    schema = {"type": "object", "properties": props, "required": list(props)}
    rep = doc(ctx, Constraint("schema", json.dumps(schema), "compact"), n=3)
    assert rep["samples"]["count"] == 3
    assert all(
        len(t) > 1000 and json.loads(t).keys() == props.keys() for t in rep["samples"]["texts"]
    )
