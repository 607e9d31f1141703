"""llama.cpp's JSON-schema rules as the peers benchmark writes them: the language each
whitespace setting accepts, checked with xgrammar's GBNF parser and matcher on a byte
vocabulary (no model)."""

from __future__ import annotations

import pytest
import xgrammar as xgr

from cfsm.bench.llamacpp_grammar import schema_gbnf
from cfsm.bench.peers import COMPACT_PERSON, ORDER

BYTES = xgr.TokenizerInfo([chr(i) for i in range(128)])
PERSON = '{"name":"Harry","age":17,"city":"London","employed":false}'
SPACED = '{ "name": "Harry", "age": 17, "city": "London", "employed": false }'
INDENTED = '{\n  "name": "Harry",\n  "age": 150,\n  "city": "L",\n  "employed": true\n}'


def accepts(gbnf: str, text: str) -> bool:
    # llama.cpp writes optional whitespace as a leading empty alternative, which xgrammar's
    # parser does not take: the same language with the empty string spelled out
    gbnf = gbnf.replace("space ::= |", 'space ::= "" |')
    m = xgr.GrammarMatcher(xgr.GrammarCompiler(BYTES).compile_grammar(gbnf))
    return m.accept_string(text) and m.is_completed()


@pytest.mark.parametrize(
    ("text", "compact", "default"),
    [
        (PERSON, True, True),
        (SPACED, False, True),
        (INDENTED, False, True),
        (PERSON.replace("17", "151"), False, False),  # maximum 150
        (PERSON.replace("Harry", "H" * 25), False, False),  # maxLength 24
        (PERSON.replace("false", '"no"'), False, False),
        (PERSON[:-1], False, False),
    ],
)
def test_compact_rules_take_compact_json_and_llamacpps_default_takes_its_whitespace(
    text, compact, default
):
    assert accepts(schema_gbnf(COMPACT_PERSON, "compact"), text) is compact
    assert accepts(schema_gbnf(COMPACT_PERSON, "llama.cpp default"), text) is default


def test_arrays_enums_and_bounds_follow_the_schema():
    g = schema_gbnf(ORDER)
    ok = '{"orderId":42,"status":"shipped","express":true,"items":["pen","mug"]}'
    assert accepts(g, ok)
    assert not accepts(g, ok.replace('["pen","mug"]', "[]"))  # minItems 1
    assert not accepts(g, ok.replace('"pen","mug"', '"pen","mug","pen","mug"'))  # maxItems 3
    assert not accepts(g, ok.replace("42", "0"))  # minimum 1
    assert not accepts(g, ok.replace("shipped", "lost"))


def test_a_keyword_outside_the_rules_is_named():
    with pytest.raises(ValueError, match="pattern"):
        schema_gbnf(
            {
                "type": "object",
                "properties": {"a": {"type": "string", "pattern": "x"}},
                "required": ["a"],
                "additionalProperties": False,
            }
        )
