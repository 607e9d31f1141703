"""JSON Schema: read and checked (parse.py), lowered to an exact regex (to_regex.py with
objects, strings, numbers, dependencies, formats, refs, ecma, budget), memoized
(compile.py), and documents written as generation writes them (output.py), under one
whitespace policy (whitespace.py)."""

from .compile import compile_schema_regex, schema_to_regex
from .output import dump_as_generated, reorder_like_schema
from .parse import load_json, parse_schema
from .whitespace import FLEXIBLE_WS, WHITESPACE_POLICIES, WhitespacePolicy

__all__ = [
    "FLEXIBLE_WS",
    "WHITESPACE_POLICIES",
    "WhitespacePolicy",
    "compile_schema_regex",
    "dump_as_generated",
    "load_json",
    "parse_schema",
    "reorder_like_schema",
    "schema_to_regex",
]
