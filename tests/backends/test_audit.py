"""Known gaps of the native backends are refused by name (or warned with --lenient),
never dropped silently."""

import json

import pytest

from engine.backends import get_backend
from engine.constraint import Constraint
from engine.errors import CfsmError

PREFIX_ITEMS = {
    "type": "array",
    "prefixItems": [
        {
            "type": "object",
            "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
            "required": ["name", "age"],
        },
        {"type": "integer"},
        {"type": "string"},
    ],
    "additionalItems": False,
}


def test_llguidance_prefix_items_next_to_additional_items_is_refused_by_name(ctx):
    """llguidance accepted `[{"name":"John","age":30},"test",42]` here (item 1 must be an
    integer): the audit names it before compiling."""
    with pytest.raises(CfsmError) as ei:
        get_backend("llguidance").compile(Constraint("schema", json.dumps(PREFIX_ITEMS)), ctx)
    assert ei.value.kind == "unsupported_feature" and "prefixItems" in ei.value.message
    lenient = Constraint("schema", json.dumps(PREFIX_ITEMS), lenient=True)
    compiled = get_backend("llguidance").compile(lenient, ctx)
    assert any("prefixItems" in w and "NOT enforced" in w for w in compiled.warnings)
    # the regex path enforces it: nothing to refuse there
    assert (
        get_backend("fsm").compile(Constraint("schema", json.dumps(PREFIX_ITEMS)), ctx).warnings
        == []
    )
