"""The doctor's what-ifs keep the schema's meaning or say they do not: on real records
(the shared JSONSchemaBench sample's MaskBench records, with their valid instances given
as the user's documents), no what-if replaces free text or alternatives by the samples'
values, and every what-if that narrows the schema says how many valid documents it
rejects; the test applies the what-if's own patch to the raw schema and counts the
rejected instances itself with the jsonschema validator."""

from __future__ import annotations

import copy
import json

import jsonschema
import pytest

from engine.constraint import Constraint
from engine.errors import CfsmError
from engine.schema.pointer import resolve

SUBSETS = ("WashingtonPost", "JsonSchemaStore", "Github_easy", "Snowplow")
PER_SUBSET = 3  # records whose schema fsm compiles, per subset (the doctor needs its automaton)


def records(root) -> list[tuple[str, dict, list]]:
    out = []
    for sub in SUBSETS:
        picked = 0
        for path in sorted((root / "maskbench" / sub).glob("*.json")):
            rec = json.loads(path.read_text(encoding="utf-8"))
            valid = [t["data"] for t in rec.get("tests", []) if t.get("valid")]
            if valid and picked < PER_SUBSET and len(json.dumps(rec["schema"])) < 12_000:
                out.append((f"{sub}/{path.stem}", rec["schema"], valid))
                picked += 1
    return out


def patched(schema: dict, patch: list[dict]) -> dict:
    s = copy.deepcopy(schema)
    for p in patch:
        found, node = resolve(s, p["at"])
        assert found and isinstance(node, dict), p["at"]
        node.update(p["set"])
    return s


def test_what_ifs_keep_the_meaning_or_count_what_they_reject(compile_engine, jsonschemabench):
    checked = narrowing = 0
    for name, schema, valid in records(jsonschemabench):
        c = Constraint.from_inputs("schema", json.dumps(schema), "compact", False, False)
        try:
            rep = compile_engine.diagnose(c, samples=4, documents=valid)
        except CfsmError as exc:  # the flat automaton's budget (issue 65's work)
            assert exc.kind in ("state_explosion", "compile_timeout", "unsupported_feature")
            continue
        checked += 1
        for w in rep["what_if"]:
            assert not w["change"].startswith(("enum of", "const =")), (name, w["change"])
            if not w["narrows"]:
                assert "patch" not in w and "keeps" in w["meaning"]
                continue
            narrowing += 1
            changed = patched(schema, w["patch"])
            before = jsonschema.validators.validator_for(schema)(schema)
            after = jsonschema.validators.validator_for(changed)(changed)
            ok = [d for d in valid if before.is_valid(d)]
            rejected = [d for d in ok if not after.is_valid(d)]
            assert w["rejects"]["rejected"] >= len(rejected), (name, w["change"])
            if rejected:
                assert f"rejects {w['rejects']['rejected']} of" in w["meaning"], (name, w)
    assert checked >= 6 and narrowing >= 3, (checked, narrowing)


@pytest.mark.parametrize("ws", ["compact", "flexible"])
def test_a_whitespace_or_reading_what_if_keeps_the_meaning(compile_engine, ws):
    schema = {"type": "object", "properties": {"title": {"type": "string"},
              "n": {"type": "integer"}}}  # fmt: skip
    c = Constraint.from_inputs("schema", json.dumps(schema), ws, False, False)
    rep = compile_engine.diagnose(c, samples=4)
    kept = [w for w in rep["what_if"] if not w["narrows"]]
    assert kept and all("keeps what the schema accepts" in w["meaning"] for w in kept)
    labels = [w["change"] for w in rep["what_if"]]
    assert ("compact separators" in labels) == (ws == "flexible")
