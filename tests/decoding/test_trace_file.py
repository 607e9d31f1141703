"""A trace file loads back as the typed `Trace` it was written from (no model)."""

import json

import pytest

from cfsm.bench.scrub import synthetic_trace
from engine.decoding.trace import TRACE_VERSION, StepRecord, Totals, Trace
from engine.errors import CfsmError


def test_a_written_trace_loads_back_typed_and_writes_the_same_file():
    written = json.loads(json.dumps(synthetic_trace("[a-z]{3}-[0-9]{2}", steps=5).to_json()))
    typed = Trace.from_json(json.dumps(written))
    assert isinstance(typed.totals, Totals) and all(isinstance(s, StepRecord) for s in typed.steps)
    assert [s.token_text for s in typed.steps] == [s["token_text"] for s in written["steps"]]
    assert "".join(s.token_text for s in typed.steps) == typed.text == written["text"]
    assert json.loads(json.dumps(typed.to_json())) == written


def test_an_older_trace_loads_typed_with_the_defaults_of_its_version():
    v5 = synthetic_trace("(yes|no)", steps=1).to_json()
    v5 = {k: v for k, v in v5.items() if k != "backend_why"} | {"version": 5}
    typed = Trace.from_json(v5)
    assert typed.version == TRACE_VERSION and typed.backend_why == ""


def test_a_field_this_version_does_not_know_is_dropped_not_fatal():
    t = synthetic_trace("(yes|no)", steps=1).to_json()
    t["steps"][0]["from_a_later_minor"] = 1
    t["later_top_level"] = {}
    assert Trace.from_json(t).steps[0].token_text == t["steps"][0]["token_text"]


@pytest.mark.parametrize(
    "broken, named",
    [
        (lambda t: t["steps"][0].pop("token_id"), "steps"),
        (lambda t: t["totals"].pop("forward_passes"), "totals"),
        (lambda t: t["jumps"].append("a jump"), "jumps"),
        (lambda t: t.pop("tokens"), "tokens"),
        (lambda t: t.update(version=TRACE_VERSION + 1), "newer"),
    ],
)
def test_a_broken_trace_is_refused_naming_what_is_wrong(broken, named):
    t = synthetic_trace("(yes|no)", steps=1).to_json()
    broken(t)
    with pytest.raises(CfsmError) as err:
        Trace.from_json(t)
    assert err.value.kind == "invalid_input" and named in err.value.message
