"""GBNF grammars for the llama.cpp peers of `cfsm bench peers`, written the way llama.cpp
writes them.

A schema goes through llama.cpp's JSON-schema conversion rules as its grammar README and
`json-schema-to-grammar` document them (what llama-server does with `response_format` and
`json_schema`): each value rule ends in `space`, a key/value pair is `"\\"key\\"" space ":"
space value`, strings are `"\\"" char* "\\"" space` (`char{0,n}` under `maxLength`),
integers `("-"? integral-part) space` (bounds as digit ranges), enums as alternatives of their
JSON spellings, arrays `"[" space (item ("," space item){m-1,n-1})? "]" space`. llama.cpp's
`space` is optional whitespace (`| " " | "\\n"{1,2} [ \\t]{0,20}`: empty, a space or a
newline and indent); `compact` makes it empty, the JSON the cfsm rows write. Keywords outside
this subset raise ValueError naming them (the peers' tasks use none).

A regex task's grammar is xgrammar's printout of the regex, in llama.cpp's spelling.
"""

from __future__ import annotations

import json
import re

from engine.replay.gbnf import regex_gbnf  # noqa: F401 - the peers' regex tasks use it
from engine.schema.numbers import int_range

LLAMA_SPACE = '| " " | "\\n"{1,2} [ \\t]{0,20}'  # llama.cpp's SPACE_RULE
COMPACT_SPACE = '""'
WHITESPACE = {"compact": COMPACT_SPACE, "llama.cpp default": LLAMA_SPACE}
PRIMITIVES = {
    "char": '[^"\\\\\\x7F\\x00-\\x1F] | [\\\\] (["\\\\bfnrt] | "u" [0-9a-fA-F]{4})',
    "integral-part": "[0] | [1-9] [0-9]{0,15}",
    "boolean": '("true" | "false") space',
    "string": '"\\"" char* "\\"" space',
    "integer": '("-"? integral-part) space',
}
KNOWN = {
    "type", "properties", "required", "additionalProperties", "maxLength", "minLength",
    "minimum", "maximum", "enum", "items", "minItems", "maxItems", "title", "description",
}  # fmt: skip


def schema_gbnf(schema: dict, whitespace: str = "compact") -> str:
    """The GBNF llama.cpp's conversion rules give `schema`, with `whitespace` ("compact" or
    "llama.cpp default") as its `space` rule; ValueError for keywords it does not cover."""
    rules: dict[str, str] = {}
    root = _value(schema, "root", rules)
    used = {"space": WHITESPACE[whitespace], **PRIMITIVES}
    lines = [f"root ::= {root}"] + [f"{k} ::= {v}" for k, v in rules.items()]
    lines += [f"{k} ::= {v}" for k, v in used.items()]
    return "\n".join(lines) + "\n"


def _literal(text: str) -> str:
    """A GBNF string literal matching `text` exactly."""
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _value(s: dict, name: str, rules: dict[str, str]) -> str:
    """The expression for one schema node (sub-rules added to `rules` under `name-*`)."""
    unknown = set(s) - KNOWN
    if unknown:
        raise ValueError(f"not covered by the llama.cpp rules here: {', '.join(sorted(unknown))}")
    if "enum" in s:
        return "(" + " | ".join(_literal(json.dumps(v)) for v in s["enum"]) + ") space"
    kind = s.get("type")
    if kind == "object":
        return _object(s, name, rules)
    if kind == "array":
        return _array(s, name, rules)
    if kind == "string":
        if "maxLength" in s or "minLength" in s:
            lo, hi = s.get("minLength", 0), s.get("maxLength", "")
            return f'"\\"" char{{{lo},{hi}}} "\\"" space'
        return "string"
    if kind == "integer":
        if "minimum" in s or "maximum" in s:
            return "(" + _digits_gbnf(int_range(s.get("minimum"), s.get("maximum"))) + ") space"
        return "integer"
    if kind == "boolean":
        return "boolean"
    raise ValueError(f"type {kind!r} is not covered by the llama.cpp rules here")


def _object(s: dict, name: str, rules: dict[str, str]) -> str:
    props, required = s.get("properties", {}), s.get("required", [])
    if set(props) - set(required) or s.get("additionalProperties", True) is not False:
        raise ValueError("optional or additional properties are not covered here")
    pairs = []
    for i, (key, sub) in enumerate(props.items()):
        # keys that differ only in other characters (`a_b`, `a.b`) get rules of their own
        rule = f"{name}-{re.sub(r'[^A-Za-z0-9-]', '-', key)}-{i}"
        rules[f"{rule}-kv"] = (
            f'{_literal(json.dumps(key))} space ":" space {_value(sub, rule, rules)}'
        )
        pairs.append(f"{rule}-kv")
    return '"{" space ' + ' "," space '.join(pairs) + ' "}" space'


def _array(s: dict, name: str, rules: dict[str, str]) -> str:
    item = f"{name}-item"
    rules[item] = _value(s.get("items", {}), item, rules)
    lo, hi = s.get("minItems", 0), s.get("maxItems")
    more = f'("," space {item}){{{max(lo - 1, 0)},{"" if hi is None else hi - 1}}}'
    body = f"{item} {more}" if lo >= 1 else f"({item} {more})?"
    return f'"[" space {body} "]" space'


def _digits_gbnf(regex: str) -> str:
    """The digit-range regex of `int_range` (groups, `|`, classes, digits, `-`, `{n}`) in
    GBNF: classes and counts are spelled alike, digits and signs become literals."""
    out, i = [], 0
    while i < len(regex):
        c = regex[i]
        if c in "[{":
            j = regex.index("]" if c == "[" else "}", i)
            out.append(regex[i : j + 1])
            i = j + 1
            continue
        out.append(f' "{c}" ' if c.isdigit() or c == "-" else f" {c} ")
        i += 1
    return re.sub(r"\s+", " ", "".join(out)).replace("( ", "(").replace(" )", ")").strip()
