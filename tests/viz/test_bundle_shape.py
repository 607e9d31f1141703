"""The step bundle's declared shape (viz/bundle_shape.py) against the page's script that
reads it (viz/static/step_view.js) and the bundle the server builds: a field renamed on
one side only, or read but never sent, fails here rather than as a blank panel."""

from __future__ import annotations

import gzip
import json
import re
from dataclasses import fields
from pathlib import Path

from cfsm.bench.scrub import synthetic_trace
from viz.bundle_shape import STEP_FIELDS, StepBundle
from viz.step_bundle import _json_script, split_bundle, step_bundle

SCRIPT = (Path(__file__).parents[2] / "viz" / "static" / "step_view.js").read_text("utf-8")
BUNDLE_FIELDS = {f.name for f in fields(StepBundle)}


def _read_by_script() -> tuple[set[str], set[str]]:
    """(fields of a step entry, fields of the bundle) the script reads. Entries are `e`
    (and `B.steps[i]`) throughout the script; the bundle is `B`."""
    entry = set(re.findall(r"\be\.([A-Za-z_]\w*)", SCRIPT))
    entry |= set(re.findall(r"\bB\.steps\[\w+\]\.([A-Za-z_]\w*)", SCRIPT))
    bundle = set(re.findall(r"\bB\.([A-Za-z_]\w*)", SCRIPT))
    return entry, bundle


def test_the_script_reads_exactly_the_declared_fields():
    entry, bundle = _read_by_script()
    assert entry - set(STEP_FIELDS) == set(), "read by the script, not declared"
    assert set(STEP_FIELDS) - entry == set(), "declared, never read by the script"
    assert bundle - BUNDLE_FIELDS == set(), "read by the script, not declared"
    assert BUNDLE_FIELDS - bundle == set(), "declared, never read by the script"


def test_the_wire_form_has_every_field_as_declared_and_a_column_per_step_field():
    trace = synthetic_trace(r"[a-z0-9]{1,2000}", steps=8)  # focus views: several layouts
    b = step_bundle(trace)
    wire = json.loads(json.dumps(b.to_json()))
    assert set(wire) == BUNDLE_FIELDS
    # a column per field set somewhere (a regex run has no schema places, no segments)
    core = {"caption", "offset", "element", "state", "layout", "trail_index", "mask", "allowed"}
    assert core <= set(wire["steps"]) <= set(STEP_FIELDS)
    assert "pointer" not in wire["steps"] and "segment_note" not in wire["steps"]
    assert all(len(col) == b.n + 1 for col in wire["steps"].values())  # the steps, the end
    k = 3
    row = {name: col[k] for name, col in wire["steps"].items()}
    assert row["element"] == b.steps[k].element and row["layout"] == b.steps[k].layout
    first, rest = split_bundle(b)
    assert first.pending and set(first.to_json()) == BUNDLE_FIELDS


def test_readable_names_cost_no_bytes_against_the_one_letter_rows():
    """The issue's budget: the bundle no larger than with the old one-letter row keys.
    The old form is rebuilt here from the same entries (keys as they were)."""
    old_keys = dict(
        caption="c", offset="o", jump_html="j", jumps_done="J", element="el", position="pos",
        place="at", pointer="ptr", layout="L", trail_index="t", mask="m", token_id="k",
        allowed="a", feasible_mass="mass", allowed_sample="s", segment_note="sn",
        no_mask="nf",
    )  # fmt: skip
    for pattern, steps in ((r"[a-z0-9]{1,2000}", 8), (r"(yes|no|maybe) [0-9]{1,3}", 5)):
        b = step_bundle(synthetic_trace(pattern, steps=steps))
        new = _json_script(b, "cfsm-bundle")
        rows = [  # as the old rows had them: no None, a segment's note only where it is
            {
                old_keys.get(k, k): v
                for k, v in vars(e).items()
                if v is not None and not (k in ("segment_note", "no_mask") and not v)
            }
            for e in b.steps
        ]
        old = _json_script({**b.to_json(), "steps": rows}, "cfsm-bundle")
        assert len(new) <= len(old), (pattern, len(new), len(old))
        assert len(gzip.compress(new.encode())) <= len(gzip.compress(old.encode())) * 1.02
