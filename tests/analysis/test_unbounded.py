"""Why a run did not end: the unbounded part of the constraint an output stopped at the
token limit was inside, and what would bound it."""

import json

import pytest

from engine.analysis.unbounded import unfinished_line, why_unfinished
from engine.constraint import Constraint

TAGS = {
    "type": "object",
    "properties": {
        "title": {"type": "string", "maxLength": 30},
        "tags": {"type": "array", "items": {"type": "string", "maxLength": 12}},
        "count": {"type": "integer"},
        "when": {"type": "string", "format": "date-time"},
    },
    "required": ["title", "tags"],
}


@pytest.mark.parametrize(
    "text, where, what",
    [
        ('{"title":"x","tags":["a","b",', "/properties/tags", "an array with no maxItems"),
        ('{"title":"x","tags":["a","b"', "/properties/tags", "an array with no maxItems"),
        ('{"title":"x","count":123456789', "/properties/count", "a number with no maximum"),
        (
            '{"title":"x","when":"2018-01-01T00:00:00.0000',
            "/properties/when",
            "a string (format date-time) with no maxLength",
        ),
    ],
)
def test_a_schema_output_at_the_limit_names_the_unbounded_part_it_was_in(text, where, what):
    u = why_unfinished(Constraint("schema", json.dumps(TAGS)), text)
    assert (u["where"], u["what"]) == (where, what)


HEALTH = {  # a real function's arguments (Glaive analyze_health_data, shortened)
    "type": "object",
    "properties": {
        "data": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {
                    "measurement": {"type": "string"},
                    "value": {"type": "number"},
                },
                "required": ["measurement", "value"],
            },
        }
    },
    "required": ["data"],
}


@pytest.mark.parametrize(
    "tail, where, what",
    [
        ('"value":3', "/properties/data", "an array with no maxItems (4 items so far)"),
        ('"measurement":"temp', "/properties/data", "an array with no maxItems (4 items so far)"),
        ('"measurement":"' + "a" * 70, "/properties/data/items/properties/measurement", "a string"),
    ],
)
def test_items_repeated_up_to_the_limit_blame_their_array_not_the_value_being_written(
    tail, where, what
):
    """The embedded model on the real preset writes the same measurement again and again
    until the limit stops it inside some small value: the array is what to bound; a long
    string in progress is still blamed itself."""
    item = '{"measurement":"t","value":36.6}'
    u = why_unfinished(
        Constraint("schema", json.dumps(HEALTH)), '{"data":[' + f"{item}," * 3 + "{" + tail
    )
    assert u["where"] == where and u["what"].startswith(what)
    two = why_unfinished(
        Constraint("schema", json.dumps(HEALTH)), '{"data":[' + f"{item}," + '{"value":3'
    )
    assert two["where"] == "/properties/data/items/properties/value"  # 2 items: not yet


def test_bounded_parts_are_not_blamed():
    c = Constraint("schema", json.dumps(TAGS))
    assert why_unfinished(c, '{"title":"abc') is None  # maxLength 30: it will end
    assert why_unfinished(c, '{"title":"x","tags":["abc') is None  # items have maxLength


def test_flexible_whitespace_runs_are_named():
    c = Constraint("schema", json.dumps(TAGS), whitespace="flexible")
    u = why_unfinished(c, '{"title": "x",' + "\n" * 12)
    assert "flexible whitespace" in u["what"] and "compact" in u["bound"]


def test_a_regex_output_names_the_repeat_with_no_maximum():
    u = why_unfinished(Constraint("regex", r"[0-9]+-[a-z]*"), "123-abcd")
    assert u["where"] == "regex characters 7-13 `[a-z]*`"
    line = unfinished_line(u)
    assert line.startswith("It stopped at the token limit in regex characters 7-13")
    assert "`[a-z]{0,40}`" in line


def test_the_doctor_lists_every_unbounded_part_and_only_those():
    from engine.analysis.unbounded import unbounded_parts

    parts = {
        (u["where"], u["what"]) for u in unbounded_parts(Constraint("schema", json.dumps(TAGS)))
    }
    assert parts == {
        ("/properties/tags", "an array with no maxItems"),
        ("/properties/count", "a number with no maximum"),
        ("/properties/when", "a string (format date-time) with no maxLength"),
    }
    rx = unbounded_parts(Constraint("regex", r"(a|b)*c[0-9]{2,}"))
    assert [u["where"] for u in rx] == [
        "regex characters 0-6 `(a|b)*`",
        "regex characters 7-16 `[0-9]{2,}`",
    ]


def test_both_order_presets_are_bounded_so_their_runs_end():
    from app.presets import presets
    from engine.analysis.unbounded import unbounded_parts

    p = presets()
    compact = p["Same order, compact separators (JSON schema)"]
    flexible = p["Flexible whitespace: poor speedup (JSON schema)"]
    assert unbounded_parts(Constraint("schema", compact["text"], compact["whitespace"])) == []
    only = unbounded_parts(Constraint("schema", flexible["text"], flexible["whitespace"]))
    assert [u["what"] for u in only] == ["flexible whitespace"]


def test_the_doctor_page_and_report_show_the_unbounded_parts(ctx):
    from engine.analysis.doctor import diagnose
    from viz.doctor_text import format_report
    from viz.summaries import doctor_md

    c = Constraint("regex", r"Tags: (a|b)+\.")
    rep = diagnose(c, ctx.tokenizer, ctx.vocab.token_bytes, n=4).to_json()
    assert rep["unbounded"][0]["where"] == "regex characters 6-12 `(a|b)+`"
    assert "Runs may not end" in format_report(rep) and "`(a|b)+`: a repeat" in format_report(rep)
    assert "| regex characters 6-12 `(a\\|b)+` | a repeat with no maximum" in doctor_md(rep)


@pytest.mark.model
def test_a_run_at_the_token_limit_says_why_on_the_page_and_in_the_trace(engine):
    from engine.decoding.request import GenerateRequest
    from viz.summaries import summary_md

    req = GenerateRequest.from_inputs(
        "Describe the sea.", Constraint("regex", r"The sea is [a-z ]+\."), max_new_tokens=6
    )
    tr = engine.generate(req)
    assert tr.totals.reason == "max_new_tokens"
    assert tr.unfinished["where"] == "regex characters 11-18 `[a-z ]+`"
    assert "Why it did not end" in summary_md(tr) and "[a-z ]{0,40}" in summary_md(tr)
    done = engine.generate(
        GenerateRequest.from_inputs("Is water wet?", Constraint("regex", "(yes|no)"))
    ).to_json()
    assert "unfinished" not in done


def test_a_text_that_leaves_at_a_bound_names_the_bound():
    from engine.analysis.unbounded import limit_reached

    c = Constraint("schema", json.dumps(TAGS))
    assert limit_reached(c, '{"title":"' + "x" * 30) == "maxLength 30 of /properties/title reached"
    assert limit_reached(c, '{"title":"' + "x" * 29) == ""
    three = {"type": "array", "items": {"type": "integer"}, "maxItems": 3}
    assert limit_reached(Constraint("schema", json.dumps(three)), "[1,2,3,") == (
        "maxItems 3 of / reached"
    )


def test_a_limit_is_found_in_a_string_with_escaped_quotes():
    """The open string starts at its unescaped quote: scanning back to the last `"` found
    an escaped one and json.loads failed (an `internal` answer in `cfsm check`)."""
    from engine.analysis.unbounded import limit_reached
    from engine.constraint import Constraint

    c = Constraint("schema", '{"type": "string", "maxLength": 4}')
    assert limit_reached(c, '"a\\"b\\\\c') == "maxLength 4 of / reached"
    assert limit_reached(c, '"\\"a\\"') == ""  # three characters so far


KUBE = {
    "type": "object",
    "properties": {
        "metadata": {
            "type": "object",
            "properties": {
                "name": {"type": "string", "maxLength": 63},
                "labels": {"type": "object", "additionalProperties": {"type": "string"}},
                "renewTime": {"type": "string", "format": "date-time"},
            },
        },
        "spec": {"$ref": "#/$defs/spec"},
    },
    "$defs": {"spec": {"type": "object", "properties": {"replicas": {"type": "integer"}}}},
}


def test_free_keys_strings_under_them_and_references_are_named_where_the_schema_has_them():
    """The Kubernetes-style schema of issue 46: labels' free keys are an unbounded place,
    a value under them sits at .../additionalProperties, a referenced node at its target,
    and a format's advice is not maxLength (fsm cannot enforce the two together)."""
    from engine.analysis.unbounded import unbounded_parts
    from engine.schema.pointer import resolve

    parts = {u["where"]: u for u in unbounded_parts(Constraint("schema", json.dumps(KUBE)))}
    labels = "/properties/metadata/properties/labels"
    assert set(parts) == {
        labels,
        labels + "/additionalProperties",
        "/properties/metadata/properties/renewTime",
        "/$defs/spec/properties/replicas",
    }
    assert all(resolve(KUBE, w)[0] for w in parts)
    assert "free keys" in parts[labels]["what"]
    renew = parts["/properties/metadata/properties/renewTime"]["bound"]
    # what can be enforced instead: an enum, a bounded pattern, or no format (then maxLength)
    assert renew.startswith("maxLength cannot be enforced together with format date-time: ")
    assert "an enum" in renew and "a pattern whose repeats have a maximum" in renew
    assert "drop the format and set maxLength" in renew
    c = Constraint("schema", json.dumps(KUBE))
    in_key = why_unfinished(c, '{"metadata":{"labels":{"app":"x","tier')
    assert (in_key["where"], "free keys" in in_key["what"]) == (labels, True)
    in_value = why_unfinished(c, '{"metadata":{"labels":{"app":"xxxxxxxx')
    assert in_value["where"] == labels + "/additionalProperties"
    deep = why_unfinished(c, '{"spec":{"replicas":1234567')
    assert deep["where"] == "/$defs/spec/properties/replicas"


def test_the_doctors_what_ifs_never_set_maxlength_next_to_a_format():
    """Issue 46: the Doctor advised maxLength on `renewTime` (format date-time), a change
    its own what-if then found fsm cannot enforce."""
    from engine.analysis.doctor.what_if import advice_variants

    schema = {
        "type": "object",
        "properties": {
            "renewTime": {"type": "string", "format": "date-time"},
            "name": {"type": "string"},
        },
    }
    causes = [{"cause": "free_text", "places": ["/properties/renewTime", "/properties/name"]}]
    texts = [
        json.dumps({"renewTime": f"2024-01-0{i}T00:00:00Z", "name": "n" * (i + 20)})
        for i in range(1, 9)
    ]
    variants = dict(advice_variants(schema, causes, texts))
    (label,) = [k for k in variants if k.startswith("maxLength")]
    assert label.endswith("at /properties/name")  # the places it changed, only
    fixed = variants[label]["properties"]
    assert fixed["name"]["maxLength"] == 28 and "maxLength" not in fixed["renewTime"]


def test_free_texts_advice_offers_no_maxlength_where_a_format_rules_it_out():
    """Issue 46: the Doctor's free-text advice named maxLength at `renewTime`, where its
    own what-if cannot enforce it beside the format; there it names what can be."""
    from engine.analysis.doctor.causes import CAUSES, suggestion

    places = ["/properties/metadata/properties/renewTime", "/properties/metadata/properties/name"]
    fix = suggestion("free_text", places, KUBE)
    assert fix.startswith(CAUSES["free_text"][2])
    assert fix.endswith(
        "Not maxLength at /properties/metadata/properties/renewTime: a format rules it out; "
        "give an `enum`, or a `pattern` whose repeats have a maximum in place of the format."
    )
    assert suggestion("free_text", places[1:], KUBE) == CAUSES["free_text"][2]
