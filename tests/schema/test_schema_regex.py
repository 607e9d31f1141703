"""The schema-to-regex compiler, keyword by keyword: what the automaton accepts is valid
for `jsonschema`, what the schema forbids is rejected, and what cannot be enforced is
refused by keyword and JSON pointer (or, lenient, compiled with a warning)."""

from __future__ import annotations

import json

import jsonschema
import pytest

from engine.analysis.check import check_text
from engine.backends import BACKENDS, TokenizerContext, get_backend
from engine.constraint import Constraint
from engine.decoding.validate import format_checker
from engine.errors import CfsmError
from engine.regex.dfa import build_char_dfa
from engine.schema.formats import FORMATS
from engine.schema.to_regex import schema_regex
from engine.tokens.byte_tokenizer import byte_tokenizer

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

# (schema, texts the automaton accepts, texts it rejects); every accepted text is also
# checked with jsonschema. Rejected: invalid texts, and a few valid ones the README's
# policy leaves out (an extra key where `properties` closes the object, a duplicate key).
CASES = [
    (
        {"type": "integer", "minimum": 1, "maximum": 99},
        ["1", "42", "99"],
        ["0", "100", "-1", "1.5", "01"],
    ),
    (
        {"type": "integer", "exclusiveMinimum": -3, "exclusiveMaximum": 120},
        ["-2", "0", "119"],
        ["-3", "120", "-10"],
    ),
    (
        {"type": "number", "minimum": 0, "maximum": 2.5},
        ["0", "2.5", "1.25", "2.4999"],
        ["-0.1", "2.51", "3"],
    ),
    ({"type": "number", "exclusiveMaximum": 0}, ["-1", "-0.001"], ["0", "0.0", "1"]),
    ({"type": "number"}, ["1e10", "-1.5E-3", "0"], ["01", "1.", "+1"]),
    ({"type": "integer", "multipleOf": 5}, ["0", "15", "-20", "1000"], ["7", "12"]),
    ({"type": "integer", "multipleOf": 7, "minimum": 0, "maximum": 50}, ["0", "49"], ["50", "8"]),
    (
        {"type": "number", "multipleOf": 0.25, "minimum": 0, "maximum": 2},
        ["0.25", "1.5", "2"],
        ["0.3", "2.25", "-0.25"],
    ),
    (
        {"type": "string", "minLength": 2, "maxLength": 3},
        ['"ab"', '"abc"', '"\\n\\t"'],
        ['"a"', '"abcd"'],
    ),
    ({"type": "string", "pattern": "^[a-z]+-[0-9]$"}, ['"ab-1"'], ['"ab-x"', '"Ab-1"']),
    ({"type": "string", "pattern": "b+"}, ['"abbc"', '"b"'], ['"ac"']),
    ({"type": "string", "pattern": '^a"b$'}, ['"a\\"b"'], ['"ab"']),
    (
        {"type": "string", "format": "date"},
        ['"2024-02-29"', '"2023-12-31"'],
        ['"2023-02-29"', '"2023-04-31"', '"2023-13-01"'],
    ),
    (
        {"type": "string", "format": "date-time"},
        ['"2019-11-30T08:15:27+05:30"', '"2019-11-30T08:15:27.5z"'],
        ['"2019-11-30 08:15:27Z"', '"1998-12-31T22:59:60Z"'],
    ),
    (
        {"type": "string", "format": "time"},
        ['"23:59:59Z"', '"08:30:06.283185Z"', '"23:59:60Z"'],
        ['"24:00:00Z"', '"08:30:06"', '"22:59:60Z"'],
    ),
    (
        {"type": "string", "format": "email"},
        ['"joe.bloggs@example.com"', '"te~st@example.com"', '"joe.bloggs@[IPv6:::1]"'],
        ['"2962"', '"a..b@x.com"', '"joe@[IPv6:::g]"'],
    ),
    (
        {"type": "string", "format": "uuid"},
        ['"2EB8AA08-AA98-11EA-B4AA-73B441D16380"'],
        ['"2eb8aa08-aa98-11ea-b4aa73b441d16380"'],
    ),
    ({"type": "string", "format": "ipv4"}, ['"192.168.0.1"'], ['"256.1.1.1"', '"01.1.1.1"']),
    (
        {"type": "string", "format": "ipv6"},
        ['"::1"', '"2001:db8::7"', '"::ffff:192.168.0.1"'],
        ['"1:2:3:4:5:6:7:8:9"', '":::"'],
    ),
    (
        {"type": "string", "format": "hostname"},
        ['"www.example.com"', '"a-b"'],
        ['"-a"', '"a_b"', '"ab--cd"'],
    ),
    (
        {"type": "string", "format": "uri"},
        ['"http://foo.bar/?baz=qux#quux"', '"mailto:a@b.c"'],
        ['"//foo.bar"', '"abc"'],
    ),
    ({"enum": ["a", 1, None, [1, 2]]}, ['"a"', "1", "null", "[1,2]"], ['"b"', "2", "true"]),
    ({"const": {"k": [1]}}, ['{"k":[1]}'], ['{"k":[2]}', '{"k":[1.0]}']),  # one spelling per number
    (
        {"maxProperties": 2.0},
        ['{"foo":1}', '{"a":1,"b":2}'],
        ['{"a":1,"b":2,"c":3}'],
    ),  # a float count
    ({"type": "string", "enum": ["a", 1, "b"], "maxLength": 1}, ['"a"', '"b"'], ["1"]),
    (
        {"type": "array", "items": {"type": "integer"}, "minItems": 1, "maxItems": 2},
        ["[1]", "[1,2]"],
        ["[]", "[1,2,3]", '["a"]'],
    ),
    (
        {"type": "array", "prefixItems": [{"type": "string"}, {"type": "integer"}], "items": False},
        ['["a",1]', '["a"]', "[]"],
        ['["a",1,2]', "[1]"],
    ),
    (
        {
            "type": "array",
            "prefixItems": [{"type": "string"}],
            "items": {"type": "boolean"},
            "minItems": 2,
        },
        ['["a",true]', '["a",true,false]'],
        ['["a"]', '["a",1]'],
    ),
    (
        {
            "type": "object",
            "properties": {"a": {"type": "integer"}, "b": {"type": "string"}},
            "required": ["b"],
        },
        ['{"b":"x"}', '{"a":1,"b":"x"}'],
        ["{}", '{"a":1}', '{"b":"x","c":1}'],
    ),
    (
        {
            "type": "object",
            "properties": {"a": {"type": "integer"}},
            "additionalProperties": {"type": "boolean"},
        },
        ['{"a":1,"z":true}', '{"z":false,"y":true}', "{}"],
        ['{"a":1,"z":1}', '{"a":1,"a":true}'],
    ),
    (
        {
            "type": "object",
            "patternProperties": {"^x-": {"type": "integer"}},
            "additionalProperties": False,
        },
        ['{"x-a":1}', "{}"],
        ['{"x-a":"s"}', '{"y":1}'],
    ),
    (
        {
            "type": "object",
            "propertyNames": {"maxLength": 2},
            "additionalProperties": {"type": "integer"},
        },
        ['{"ab":1}'],
        ['{"abc":1}'],
    ),
    (
        {"anyOf": [{"type": "integer", "maximum": 3}, {"type": "string"}]},
        ["3", '"s"'],
        ["4", "null"],
    ),
    (
        {
            "oneOf": [
                {
                    "type": "object",
                    "properties": {"k": {"const": "a"}, "v": {"type": "integer"}},
                    "required": ["k", "v"],
                },
                {
                    "type": "object",
                    "properties": {"k": {"const": "b"}, "v": {"type": "string"}},
                    "required": ["k", "v"],
                },
            ]
        },
        ['{"k":"a","v":1}', '{"k":"b","v":"x"}'],
        ['{"k":"a","v":"x"}'],
    ),
    ({"allOf": [{"type": "integer", "minimum": 2}, {"maximum": 5}]}, ["2", "5"], ["1", "6"]),
    (
        {
            "$defs": {"pos": {"type": "integer", "minimum": 1}},
            "type": "array",
            "items": {"$ref": "#/$defs/pos"},
        },
        ["[1,2]"],
        ["[0]"],
    ),
    (
        {
            "$defs": {"node": {"type": "object", "properties": {"next": {"$ref": "#/$defs/node"}}}},
            "$ref": "#/$defs/node",
        },
        ["{}", '{"next":{"next":{}}}'],
        ['{"next":1}'],
    ),
    (
        INVOICE,
        ['{"id":"A1","lines":[{"sku":"ABC-123","qty":99,"price":1.5}]}'],
        ['{"id":"A1","lines":[{"sku":"ABC-123","qty":100,"price":1.5}]}', '{"id":"A1","lines":[]}'],
    ),
]


def _accepts(schema, text: str, ws: str = "compact") -> bool:
    return build_char_dfa(schema_regex(schema, ws).regex).accepts(text)


@pytest.mark.parametrize("schema,good,bad", CASES, ids=[json.dumps(c[0])[:60] for c in CASES])
def test_keyword_enforced_exactly(schema, good, bad):
    validator = jsonschema.Draft202012Validator(schema, format_checker=format_checker())
    dfa = build_char_dfa(schema_regex(schema).regex)
    for text in good:
        assert validator.is_valid(json.loads(text)), text  # the case itself is right
        assert dfa.accepts(text), text
    for text in bad:  # invalid ones, and a few valid ones the documented policy leaves out
        assert not dfa.accepts(text), text


@pytest.mark.parametrize(
    "schema,keyword,pointer",
    [
        (
            {"type": "object", "properties": {"a": {"not": {"type": "string"}}}},
            "not",
            "/properties/a/not",
        ),
        (
            {"type": "array", "items": {"type": "integer"}, "uniqueItems": True},
            "uniqueItems",
            "/uniqueItems",
        ),
        ({"type": "string", "format": "duration"}, "format", "/format"),
        ({"type": "string", "pattern": "^(?=.*[0-9])[a-z0-9]{3,8}$"}, "pattern", "/pattern"),
        ({"type": "number", "multipleOf": 0.3}, "multipleOf", "/multipleOf"),
        (
            {"type": "number", "multipleOf": 0.01},
            "multipleOf",
            "/multipleOf",
        ),  # unbounded: float division decides
        ({"if": {"type": "string"}, "then": {"minLength": 2}}, "if", "/if"),
        (
            {"type": "string", "pattern": "^([a-z]+\\.)*[a-z]{2,}$", "maxLength": 300},
            "maxLength",
            "/maxLength",
        ),  # the intersection with the length is past the product's limits (a pattern and
        # a small length, `"a"` within 3, is exact: tests/schema/test_string_intersections.py)
    ],
)
def test_unenforceable_keyword_refused_by_name_and_pointer(schema, keyword, pointer):
    with pytest.raises(CfsmError) as err:
        schema_regex(schema)
    assert err.value.kind == "unsupported_feature"
    assert f"`{keyword}`" in err.value.message and pointer in err.value.message


def test_lenient_compiles_with_a_warning_that_reaches_the_compiled_constraint():
    schema = json.dumps({"type": "array", "items": {"type": "integer"}, "uniqueItems": True})
    res = schema_regex(json.loads(schema), lenient=True)
    assert res.warnings and "uniqueItems" in res.warnings[0] and "NOT enforced" in res.warnings[0]
    ctx = TokenizerContext(byte_tokenizer())
    compiled = get_backend("fsm").compile(Constraint("schema", schema, lenient=True), ctx)
    assert compiled.warnings == res.warnings
    assert compiled.stats()["warnings"] == res.warnings


@pytest.mark.parametrize(
    "ws,text",
    [("compact", '{"a":[1,2]}'), ("spaced", '{"a": [1, 2]}'), ("flexible", '{ "a" : [ 1 , 2 ] }')],
)
def test_whitespace_policy(ws, text):
    schema = {
        "type": "object",
        "properties": {"a": {"type": "array", "items": {"type": "integer"}}},
        "required": ["a"],
    }
    assert _accepts(schema, text, ws)


@pytest.fixture(scope="module")
def byte_ctx():
    return TokenizerContext(byte_tokenizer())


def test_xgrammar_refuses_a_lookahead_it_would_drop(byte_ctx):
    schema = json.dumps({"type": "string", "pattern": "^(?=.*[0-9])[a-z0-9]{3,8}$"})
    with pytest.raises(CfsmError) as err:
        get_backend("xgrammar").compile(Constraint("schema", schema), byte_ctx)
    assert "`pattern` at /pattern" in err.value.message and "xgrammar" in err.value.message
    compiled = get_backend("xgrammar").compile(Constraint("schema", schema, lenient=True), byte_ctx)
    assert compiled.warnings and "look-around" in compiled.warnings[0]
    # what the warning is about: xgrammar lets "abc" (no digit) through
    assert check_text(compiled, None, byte_ctx, '"abc"')["accepted"]


@pytest.mark.parametrize(
    "backend,schema,keyword",
    [
        ("xgrammar", {"minimum": 2}, "minimum"),
        ("xgrammar", {"type": "integer", "multipleOf": 2}, "multipleOf"),
        ("llguidance", {"type": "string", "format": "date"}, "format"),
    ],
)
def test_native_backend_gaps_refused(byte_ctx, backend, schema, keyword):
    with pytest.raises(CfsmError) as err:
        get_backend(backend).compile(Constraint("schema", json.dumps(schema)), byte_ctx)
    assert err.value.kind == "unsupported_feature" and f"`{keyword}`" in err.value.message


def test_held_out_invoice_is_enforced_by_every_backend(byte_ctx):
    bad = '{"id":"A1","lines":[{"sku":"ABC-123","qty":100,"price":1.5}]}'
    good = '{"id":"A1","lines":[{"sku":"ABC-123","qty":99,"price":1.5}]}'
    for b in BACKENDS:
        compiled = get_backend(b).compile(Constraint("schema", json.dumps(INVOICE)), byte_ctx)
        assert check_text(compiled, None, byte_ctx, good)["accepted"], b
        assert not check_text(compiled, None, byte_ctx, bad)["accepted"], b


def test_conformance_suite_subset_accepts_no_invalid_instance_unwarned():
    from cfsm.bench.conformance import SUITE_DIR, ConformanceRun

    if not SUITE_DIR.exists():
        pytest.skip("../shared/bench-data/json-schema-test-suite is not present")
    ctx = TokenizerContext(byte_tokenizer())
    for backend in ("fsm", "xgrammar", "llguidance"):
        run = ConformanceRun(backend, ctx, "compact", False)
        for name in ("maximum.json", "minLength.json", "required.json", "enum.json"):
            run.run_file(SUITE_DIR / name, name)
        assert run.totals["compiled"] > 0, backend
        assert run.totals["invalid_accepted_unwarned"] == 0, (backend, run.cases)


# Found in review: each was accepted although jsonschema calls it invalid. Now refused or rejected.
NEVER = [
    (
        {"type": "number", "multipleOf": 0.1},
        "0.3",
        False,
    ),  # jsonschema divides floats: 0.3 / 0.1 = 2.9999999999999996
    ({"type": "number", "exclusiveMaximum": 1}, "0.99999999999999999999", False),  # parses to 1.0
    ({"type": "number", "exclusiveMinimum": 0.1}, "0.10000000000000000001", False),
    ({"type": "number", "minimum": 9007199254740993}, "9007199254740993.0", False),
    ({"allOf": [{"enum": [[1]]}, {"enum": [[True]]}]}, "[1]", False),  # true is not 1, nested too
    ({"allOf": [{"const": {"a": 1}}, {"const": {"a": True}}]}, '{"a":1}', False),
    ({"const": [1], "enum": [[True]]}, "[1]", False),
    (
        {
            "type": ["string", "object"],
            "properties": {"v": {"enum": [["x"], [1]], "items": {"$ref": "#"}}},
        },
        '{"v":[1]}',
        False,
    ),
    ({"type": "object", "properties": {}, "dependentRequired": {"t": ["b"]}}, '{"t":1}', False),
    ({"type": "string", "pattern": "^[^\\x00-\\x09\\x0b-\\U0010ffff]+$"}, '"\\nnn"', False),
    (
        {"type": "number", "multipleOf": 0.3, "minimum": 0},
        "-5",
        True,
    ),  # lenient drops only multipleOf
    ({"type": "integer", "multipleOf": 0.3, "minimum": 0, "maximum": 10000}, "1.5", True),
]


@pytest.mark.parametrize("schema,text,lenient", NEVER, ids=[json.dumps(c[0])[:50] for c in NEVER])
def test_invalid_document_never_accepted(schema, text, lenient):
    assert not jsonschema.Draft202012Validator(schema).is_valid(json.loads(text))
    try:
        rx = schema_regex(schema, lenient=lenient).regex
    except CfsmError as exc:
        assert (
            exc.kind in ("unsupported_feature", "unsatisfiable")
            and not lenient
            or exc.kind == "unsatisfiable"
        )
        return
    assert not build_char_dfa(rx).accepts(text)


@pytest.mark.parametrize(
    "schema",
    [
        {"allOf": [{"$ref": "#/$defs/f"}], "$defs": {"f": False}},
        {
            "type": "object",
            "properties": {"a": {}},
            "propertyNames": {"$ref": "#/$defs/n"},
            "$defs": {"n": {"maxLength": 3}},
        },
        {"anyOf": [{"type": "null"}, {"$ref": "#"}]},
        {"type": "integer", "multipleOf": 4096},
        {"oneOf": [{"type": "null"}, {"$ref": "#"}]},
        {
            "properties": {"a": {}},
            "patternProperties": {"\\p{L}": {}},
        },  # ECMA, but Python's re cannot read it
    ],
)
def test_odd_schemas_give_an_error_object_or_a_regex(schema):
    try:
        rx = schema_regex(schema).regex
    except CfsmError as exc:
        assert exc.kind in ("unsupported_feature", "unsatisfiable") and "\n" not in exc.message
        return
    assert build_char_dfa(rx, max_states=10_000).num_states >= 1


def test_ignorecase_folds_before_a_negated_class_complements():
    import re

    dfa = build_char_dfa("(?i)[^a-z]")
    for ch in "Qq!":
        assert dfa.accepts(ch) == bool(re.fullmatch("(?i)[^a-z]", ch, re.ASCII)), ch


def test_several_pattern_properties_values_satisfy_every_pattern():
    schema = {
        "type": "object",
        "patternProperties": {"a*": {"type": "integer"}, "aaa*": {"maximum": 20}},
    }
    validator = jsonschema.Draft202012Validator(schema)
    dfa = build_char_dfa(schema_regex(schema).regex)
    for text in ('{"aaaa":18}', '{"a":1,"aaaa":18}', "{}"):
        assert dfa.accepts(text) and validator.is_valid(json.loads(text)), text
    assert not dfa.accepts('{"aaaa":21}') and not validator.is_valid({"aaaa": 21})


def test_a_property_named_like_a_keyword_is_not_a_gap(byte_ctx):
    schema = {
        "type": "object",
        "properties": {"minimum": {"type": "string"}},
        "required": ["minimum"],
    }
    compiled = get_backend("xgrammar").compile(Constraint("schema", json.dumps(schema)), byte_ctx)
    assert (
        not compiled.warnings
        and check_text(compiled, None, byte_ctx, '{"minimum":"x"}')["accepted"]
    )


# (schema, texts only the spec reading accepts, texts neither accepts)
SPEC = [
    (
        {"type": "object", "properties": {"a": {"type": "integer"}}},
        ['{"a":1,"b":[true]}', '{"zz":null}'],
        ['{"a":"x"}', '{"a":1,"a":2}'],
    ),
    (
        {"type": "object", "properties": {"a": {}}, "additionalProperties": False},
        [],
        ['{"a":1,"b":2}'],
    ),
    (
        {"type": "integer", "minimum": 1, "maximum": 99},
        ["99.0", "1.00"],
        ["100.0", "0.0", "1.5", "1."],
    ),
    ({"const": 1}, ["1.0"], ["1.5", "true"]),
    ({"const": -2.0}, ["-2"], ["2"]),  # generation writes -2.0; both spell the same number
    ({"enum": [[0], 1.5]}, ["[0.0]", "1.50"], ["[false]", "1.05"]),
    (
        {"const": {"foo": "bar", "baz": 1}},
        ['{"baz":1,"foo":"bar"}', '{"baz":1.0,"foo":"bar"}'],
        ['{"foo":"bar"}'],
    ),
    ({"type": "integer", "multipleOf": 2, "minimum": 0, "maximum": 10}, ["4.0"], ["3.0", "12.0"]),
    (
        {"type": "integer", "maximum": 9007199254740995},
        [],
        ["9007199254740995.0"],
    ),  # the float rounds up past the bound
    (
        {
            "anyOf": [
                {"properties": {"bar": {"type": "integer"}}, "required": ["bar"]},
                {"properties": {"foo": {"type": "string"}}, "required": ["foo"]},
            ]
        },
        ['{"bar":2,"foo":"baz"}'],
        ['{"bar":"x"}'],
    ),
]


@pytest.mark.parametrize(
    "schema,spec_only,neither", SPEC, ids=[json.dumps(c[0])[:60] for c in SPEC]
)
def test_spec_reading_accepts_what_json_schema_allows_and_nothing_invalid(
    schema, spec_only, neither
):
    validator = jsonschema.Draft202012Validator(schema)
    generation = build_char_dfa(schema_regex(schema).regex)
    spec = build_char_dfa(schema_regex(schema, spec=True).regex)
    for text in spec_only:
        assert validator.is_valid(json.loads(text)), text
        assert spec.accepts(text) and not generation.accepts(text), text
    for text in neither:
        assert not spec.accepts(text) and not generation.accepts(text), text


def test_spec_reading_reaches_every_backend_and_the_cache_key(byte_ctx):
    schema = json.dumps(
        {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}
    )
    closed, open_ = Constraint("schema", schema), Constraint("schema", schema, spec=True)
    assert closed.key != open_.key
    for b in BACKENDS:
        compiled = get_backend(b).compile(open_, byte_ctx)
        assert check_text(compiled, None, byte_ctx, '{"a":1,"b":2}')["accepted"], b
        assert not check_text(compiled, None, byte_ctx, '{"b":2}')["accepted"], b
    for b in BACKENDS:  # llguidance gets it closed
        compiled = get_backend(b).compile(closed, byte_ctx)
        assert not check_text(compiled, None, byte_ctx, '{"a":1,"b":2}')["accepted"], b


def test_llguidance_in_the_closed_reading_keeps_allof_members_open(byte_ctx):
    """llguidance is given the schema closed, except an allOf's members (and a member's
    reference target): closing each would refuse the keys the other member lists."""
    member = {"properties": {"y": {"type": "integer"}}}
    schema = {
        "type": "object",
        "properties": {"b": {"allOf": [{"$ref": "#/$defs/base"}, member]}},
        "$defs": {"base": {"properties": {"z": {"type": "integer"}}}},
    }
    compiled = get_backend("llguidance").compile(Constraint("schema", json.dumps(schema)), byte_ctx)
    assert check_text(compiled, None, byte_ctx, '{"b":{"z":1,"y":2}}')["accepted"]
    assert not check_text(compiled, None, byte_ctx, '{"c":1}')["accepted"]  # the root: closed


def test_the_closed_reading_leaves_schemas_that_test_a_value_as_they_are():
    """Closing an object under `not` would make the `not` refuse more (and under `if`
    match less); a property that happens to be called `not` is closed like any other."""
    from engine.backends.json_options import closed_reading

    inner = {"properties": {"b": {"type": "integer"}}, "required": ["b"]}
    named = {"type": "object", "properties": {"x": {"type": "string"}}}
    schema = {
        "type": "object",
        "properties": {"not": named},
        "not": inner,
        "if": inner,
    }
    out = closed_reading(schema)
    assert out["additionalProperties"] is False
    assert out["properties"]["not"]["additionalProperties"] is False
    assert "additionalProperties" not in out["not"] and "additionalProperties" not in out["if"]
    assert schema["properties"]["not"] == named  # the caller's schema is not changed


def test_the_closed_reading_keeps_an_allof_reference_open_whatever_its_name():
    """A `$defs` name with a `/` is `~1` in the reference: the target is still found as an
    allOf member's and left open."""
    from engine.backends.json_options import closed_reading

    base = {"properties": {"z": {"type": "integer"}}}
    schema = {
        "allOf": [{"$ref": "#/$defs/a~1b"}, {"properties": {"y": {}}}],
        "$defs": {"a/b": base},
    }
    assert "additionalProperties" not in closed_reading(schema)["$defs"]["a/b"]


def test_an_anchor_inside_an_enum_is_data_not_an_identifier():
    schema = {
        "$defs": {
            "in_enum": {"enum": [{"$anchor": "my_anchor", "type": "null"}]},
            "real": {"$anchor": "my_anchor", "type": "string"},
        },
        "anyOf": [{"$ref": "#/$defs/in_enum"}, {"$ref": "#my_anchor"}],
    }
    dfa = build_char_dfa(schema_regex(schema).regex)
    assert dfa.accepts('"any string"') and dfa.accepts('{"$anchor":"my_anchor","type":"null"}')
    assert not dfa.accepts('{"type":"null"}') and not dfa.accepts("1")


@pytest.mark.parametrize("backend", ["fsm", "xgrammar", "llguidance"])
def test_a_custom_metaschema_is_refused_by_name(byte_ctx, backend):
    schema = {
        "$schema": "http://localhost:1234/draft2020-12/metaschema-no-validation.json",
        "properties": {"a": {"type": "integer"}},
    }
    with pytest.raises(CfsmError) as err:
        get_backend(backend).compile(Constraint("schema", json.dumps(schema)), byte_ctx)
    assert err.value.kind == "unsupported_feature" and "`$schema` at /$schema" in err.value.message
    standard = {
        **schema,
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "type": "object",
    }
    assert (
        get_backend(backend).compile(Constraint("schema", json.dumps(standard)), byte_ctx)
        is not None
    )


def test_instances_are_written_in_the_order_an_all_of_merge_generates():
    from engine.schema import dump_as_generated

    schema = {
        "allOf": [
            {"properties": {"bar": {"type": "integer"}}, "required": ["bar"]},
            {"properties": {"foo": {"type": "string"}}, "required": ["foo"]},
        ]
    }
    text = dump_as_generated({"foo": "baz", "bar": 2}, schema)
    assert text == '{"bar":2,"foo":"baz"}' and build_char_dfa(schema_regex(schema).regex).accepts(
        text
    )


@pytest.mark.parametrize("fmt", sorted(FORMATS))
def test_every_string_a_format_regex_generates_passes_the_output_validator(fmt):
    """The output validator checks `format` on its own (jsonschema's checkers, RFC 3339
    time here): whatever the compiler lets a model write must pass it. `byte`, which
    jsonschema does not check, must decode as base64."""
    import base64
    import binascii

    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st

    @settings(
        max_examples=150, derandomize=True, deadline=None, suppress_health_check=list(HealthCheck)
    )
    @given(st.from_regex(FORMATS[fmt], fullmatch=True))
    def check(content):
        try:
            value = json.loads(f'"{content}"')
        except ValueError:  # from_regex may pick characters our content regex excludes elsewhere
            return
        assert format_checker().conforms(value, fmt), (fmt, value)
        if fmt == "byte":
            try:
                base64.b64decode(value, validate=True)
            except binascii.Error as e:
                raise AssertionError((fmt, value)) from e

    check()


def test_the_output_validator_checks_formats_and_rfc3339_leap_seconds():
    from engine.decoding.validate import validate_output

    def valid(fmt: str, value: str) -> bool | None:
        c = Constraint("schema", json.dumps({"type": "string", "format": fmt}))
        return validate_output(c, json.dumps(value), True, "complete", None)[0]

    assert valid("date", "2024-02-29") and not valid("date", "2023-02-29")
    assert valid("time", "15:59:60-08:00") and valid(
        "time", "23:59:60Z"
    )  # jsonschema's own checker says no
    assert not valid("time", "22:59:60Z") and not valid("time", "1২:00:00Z")
    assert valid("date-time", "1998-12-31T15:59:60.123-08:00") and not valid(
        "date-time", "1985-04-12T23:20:50Z\n"
    )
    assert not valid("ipv4", "256.1.1.1") and not valid("uri", "//no-scheme")


def test_pattern_properties_regions_accept_exactly_the_valid_objects():
    """Random objects under random patternProperties: nothing invalid is accepted in either
    reading, and with the spec reading nothing valid is rejected. Patterns are ECMA-262
    (`$`, `.`, `\\s` differ from Python's `re`): jsonschema gets them through ecma_schema."""
    import random

    from engine.schema import dump_as_generated
    from engine.schema.ecma import ecma_schema

    pats, subs = (
        ["a", "^a", "b$", "a.b", "^[ab]+$", "c*", "ab|ba", "^x-", "\\d{2}", "\\s", "^\\W"],
        [{"type": "integer"}, {"maximum": 5}, {"type": "string"}, True, False, {"minimum": 3}],
    )
    keys, values = (
        [
            "a",
            "b",
            "ab",
            "ba",
            "c",
            "ca",
            "xb",
            "x-1",
            "12",
            'a"b',
            "",
            "b\n",
            "a\u2028b",
            "\ufeff",
            "\u0661\u0662",
            "é",
        ],
        [1, 7, "s", True, None, 4.5],
    )
    rnd = random.Random(7)
    checked = 0
    for _ in range(16):
        schema: dict = {
            "patternProperties": {p: rnd.choice(subs) for p in rnd.sample(pats, rnd.randint(1, 3))}
        }
        extra = rnd.choice([None, False, {"type": "boolean"}, True])
        if extra is not None:
            schema["additionalProperties"] = extra
        if rnd.random() < 0.4:
            schema["properties"] = {rnd.choice(keys): rnd.choice(subs)}
        validator = jsonschema.Draft202012Validator(ecma_schema(schema))
        for spec in (False, True):
            dfa = build_char_dfa(
                schema_regex(schema, spec=spec).regex, max_states=200_000, max_chars=10**7
            )
            for _ in range(15):
                doc = {k: rnd.choice(values) for k in rnd.sample(keys, rnd.randint(0, 2))}
                text, valid = dump_as_generated(doc, schema), validator.is_valid(doc)
                assert not (dfa.accepts(text) and not valid), (schema, text)
                assert not spec or dfa.accepts(text) == valid, (schema, text)
                checked += 1
    assert checked == 16 * 2 * 15


@pytest.mark.parametrize(
    "pattern,value,valid",
    [
        ("^\\D$", "\u07c0", True),
        ("^\\d$", "\u07c0", False),
        ("^\\W$", "é", True),
        ("^\\w$", "é", False),
        ("^\\s$", "\ufeff", True),
        ("^\\S$", "\ufeff", False),
        ("^a$", "a\n", False),
        ("^a.b$", "a\u2028b", False),
        ("^a.b$", "a\u00e9b", True),
    ],
)
def test_patterns_are_read_as_ecma_262_by_the_compiler_and_the_validator(pattern, value, valid):
    from engine.decoding.validate import validate_output

    schema = {"type": "string", "pattern": pattern}
    text = json.dumps(value, ensure_ascii=False)
    assert build_char_dfa(schema_regex(schema).regex).accepts(text) == valid
    assert (
        validate_output(Constraint("schema", json.dumps(schema)), text, True, "complete", None)[0]
        == valid
    )


D4 = "http://json-schema.org/draft-04/schema#"
# Found in review of the spec reading, the pattern regions and the ECMA-262 reading: each
# was accepted although invalid (under the declared draft, patterns read as ECMA-262).
NEVER_EITHER_READING = [
    (
        {"patternProperties": {"[^\u4e00-\u9fff]": {"type": "integer"}, "é": {"type": "string"}}},
        '{"é":"s"}',
    ),
    (
        {
            "patternProperties": {"^[ -\u7fff]$": {"type": "string"}},
            "additionalProperties": {"type": "integer"},
        },
        '{"é":1}',
    ),
    (
        {
            "properties": {"é": {"type": "integer"}},
            "patternProperties": {"\\W": {"type": "string"}},
        },
        '{"é":1}',
    ),
    (
        {
            "type": "integer",
            "multipleOf": 0.5,
            "minimum": 1152921504606846977,
            "maximum": 1152921504606846979,
        },
        "1152921504606846977.0",
    ),
    ({"type": "integer"}, "1" + "0" * 400 + ".0"),  # a float reads it as infinity
    (
        {
            "$defs": {"t": {"type": "integer"}},
            "required": ["default"],
            "additionalProperties": False,
            "properties": {
                "default": {
                    "$id": "http://e.com/i",
                    "$defs": {"t": {"type": "string"}},
                    "$ref": "#/$defs/t",
                }
            },
        },
        '{"default":1}',
    ),
    ({"$schema": D4, "type": "integer"}, "1.0"),  # draft-04: 1.0 is no integer
    ({"$schema": D4, "type": "integer", "minimum": 5, "exclusiveMinimum": True}, "5"),
]


@pytest.mark.parametrize(
    "schema,text", NEVER_EITHER_READING, ids=[json.dumps(c[0])[:50] for c in NEVER_EITHER_READING]
)
@pytest.mark.parametrize("spec", [False, True])
def test_review_findings_are_never_accepted(schema, text, spec):
    from engine.schema.ecma import ecma_schema

    cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
    assert not cls(ecma_schema(schema)).is_valid(json.loads(text))
    try:
        rx = schema_regex(schema, spec=spec).regex
    except CfsmError as exc:
        assert exc.kind == "unsupported_feature"
        return
    assert not build_char_dfa(rx, max_states=200_000, max_chars=10**7).accepts(text)


def test_regex_algebra_matches_brute_force_and_survives_all_final():
    import itertools
    import re

    from engine.regex.algebra import combine

    assert combine(["a*"], lambda b: True) is not None  # every product state final: no crash
    cases = [
        (["[ab]*", ".*b.*"], lambda b: b[0] and not b[1]),
        (["a|ab", "(ab)*"], lambda b: b[0] != b[1]),
        (["[^a]c", "x?"], lambda b: not b[0] and not b[1]),
    ]
    for regexes, want in cases:
        rx = combine(regexes, want)
        for n in range(4):
            for chars in itertools.product("abcx\n", repeat=n):
                t = "".join(chars)
                expected = want(tuple(bool(re.fullmatch(r, t)) for r in regexes))
                assert (rx is not None and re.fullmatch(rx, t) is not None) == expected, (
                    regexes,
                    t,
                )


def test_a_schema_nested_past_the_parser_is_a_one_line_error():
    from engine.errors import CfsmError
    from engine.schema import parse_schema

    with pytest.raises(CfsmError) as ei:
        parse_schema("[" * 90_000 + "]" * 90_000)  # valid JSON, deeper than any parser goes
    assert ei.value.kind == "input_too_large" and "nested too deeply" in ei.value.message


FINITE = [
    # JSONSchemaBench's Synthesized records: a listed value and a double negation
    {"allOf": [{"enum": [[1, 2, 3, 4, 5]]}, {"not": {"not": {"items": {"type": "integer"}}}}]},
    {"allOf": [{"enum": [{"foo": 12}, 6]}, {"not": {"type": "object"}}]},
    # keywords the regex path cannot lower by themselves, beside a list of values
    {"enum": [[1, 1], [1, 2], "a"], "uniqueItems": True},
    {"enum": [{"a": 1}, {"b": 2}, {"a": 1, "b": 2}], "dependencies": {"a": ["b"]}},
    {"$defs": {"n": {"type": "integer"}}, "enum": [1, 1.5, "x"], "$ref": "#/$defs/n"},
    {"const": "x", "not": {"enum": ["x"]}},  # nothing left: unsatisfiable
]


@pytest.mark.parametrize("schema", FINITE)
def test_listed_values_are_checked_against_every_keyword_beside_them(schema):
    """An `enum`/`const` (on the node or in an `allOf` member) makes the node's values a
    finite list: each is kept exactly when the JSON Schema validator of the document says
    it is valid, whatever the other keywords are (`not`, `uniqueItems`, `dependencies`,
    references into the document), so none of them is refused there."""
    listed = schema.get("enum") or ([schema["const"]] if "const" in schema else [])
    listed = listed or schema["allOf"][0]["enum"]
    valid = [v for v in listed if jsonschema.validators.validator_for(schema)(schema).is_valid(v)]
    try:
        rx = schema_regex(schema).regex
    except CfsmError as exc:
        assert exc.kind == "unsatisfiable" and valid == []
        return
    dfa = build_char_dfa(rx)
    for v in listed:
        text = json.dumps(v, separators=(",", ":"))
        assert dfa.accepts(text) == (v in valid), (schema, text)


ADDRESS = {  # WashingtonPost's address trait (JSONSchemaBench wp_4), shortened
    "$schema": "http://json-schema.org/draft-07/schema#",  # `dependencies` is draft-07's
    "type": "object",
    "properties": {
        "extended_address": {"type": "string"},
        "locality": {"type": "string"},
        "post_office_box": {"type": "string"},
        "street_address": {"type": "string"},
    },
    "dependencies": {"extended_address": ["street_address"], "post_office_box": ["street_address"]},
}


@pytest.mark.parametrize(
    "schema",
    [
        ADDRESS,
        {
            **{k: v for k, v in ADDRESS.items() if k not in ("dependencies", "$schema")},
            "dependentRequired": ADDRESS["dependencies"],
        },  # fmt: skip
        {**ADDRESS, "required": ["post_office_box"]},  # one trigger required, one optional
    ],
)
def test_optional_dependency_triggers_are_lowered_as_the_cases_of_which_are_present(schema):
    """`dependencies` (draft-07 lists) and `dependentRequired` on optional triggers were
    refused; now every subset of the properties is accepted exactly when the validator of
    the schema's draft accepts it."""
    import itertools

    dfa = build_char_dfa(schema_regex(schema).regex)
    check = jsonschema.validators.validator_for(schema)(schema)
    names = list(schema["properties"])
    for n in range(len(names) + 1):
        for keys in itertools.combinations(names, n):
            doc = {k: "a" for k in keys}
            text = json.dumps(doc, separators=(",", ":"))
            assert dfa.accepts(text) == check.is_valid(doc), (text, schema.get("required"))


@pytest.mark.parametrize(
    "schema, where",
    [
        # Github_hard/o84346: `required` names keys the closed object does not list
        (
            {"type": "object", "properties": {"title": {"type": "string"}},
             "required": ["title", "id"]},
            "`required` at /required names 'id'",
        ),
        # Glaive calculate_area: a required trigger needs a key the object does not list
        (
            {"type": "object",
             "properties": {"d": {"type": "object", "properties": {"base": {"type": "number"}},
                                  "required": ["base"], "dependencies": {"base": ["triangle"]}}},
             "required": ["d"]},
            "nothing can be written at /properties/d",
        ),
    ],
)  # fmt: skip
def test_an_unsatisfiable_schema_names_where_nothing_can_be_written(schema, where):
    with pytest.raises(CfsmError) as ei:
        schema_regex(schema)
    assert ei.value.kind == "unsatisfiable" and where in ei.value.message


def test_a_value_listed_in_a_nested_all_of_is_lowered_after_merging():
    """Found by the fuzz test: a `const` two `allOf`s down is met only once they are
    merged, and goes through the same check of the listed values."""
    schema = {"allOf": [{"type": "string"}, {"allOf": [{"type": "string"}, {"const": "k"}]}]}
    dfa = build_char_dfa(schema_regex(schema).regex)
    assert dfa.accepts('"k"') and not dfa.accepts('"j"')
