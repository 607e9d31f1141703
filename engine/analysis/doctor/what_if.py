"""What-ifs: the schema changed as the advice says, measured on the same samples."""

from __future__ import annotations

import copy
import json
import time
from collections import Counter
from collections.abc import Callable

from ...constraint import Constraint
from ...errors import CfsmError
from ...regex.dfa import CharDFA, build_char_dfa
from ...schema import dump_as_generated, parse_schema
from ...schema.pointer import join, resolve, split
from .causes import analyse_samples
from .samples import synthesize

# (constraint, seconds) -> its character automaton, or CfsmError within those seconds
Automaton = Callable[[Constraint, float], CharDFA] | None


def _what_if_schema(schema: dict, fix: str) -> dict | None:
    """A mechanical version of a suggestion, or None when it does not apply."""

    s = copy.deepcopy(schema)
    changed = False

    def visit(node):
        nonlocal changed
        if isinstance(node, dict):
            if (
                fix == "required_ordered"
                and node.get("type") == "object"
                and isinstance(node.get("properties"), dict)
            ):
                props = list(node["properties"])
                if (
                    set(node.get("required", [])) != set(props)
                    or node.get("additionalProperties") is not False
                ):
                    node["required"] = props
                    node["additionalProperties"] = False
                    changed = True
            if (
                fix == "fixed_arrays"
                and node.get("type") == "array"
                and "maxItems" in node
                and node.get("minItems") != node["maxItems"]
            ):
                node["minItems"] = node["maxItems"]
                changed = True
            for v in node.values():
                visit(v)
        elif isinstance(node, list):
            for v in node:
                visit(v)

    if fix in ("required_ordered", "fixed_arrays"):
        visit(s)
    return s if changed else None


def _node_at(schema: dict, pointer: str) -> dict | None:
    """The schema node a doctor place names (a pointer into the schema), or None."""
    found, node = resolve(schema, pointer)
    return node if found and isinstance(node, dict) else None


def _values_at(docs: list, pointer: str) -> list:
    """The values the sample documents hold at a doctor place: every item of an array,
    every value of an object with free keys; none where the place is reached through a
    reference (its pointer no longer follows the documents)."""
    found, parts, i = list(docs), split(pointer), 0
    while i < len(parts):
        kw, arg = parts[i], parts[i + 1] if i + 1 < len(parts) else None
        if kw == "properties" and arg is not None:
            found, i = [d[arg] for d in found if isinstance(d, dict) and arg in d], i + 2
        elif kw in ("additionalProperties", "patternProperties"):
            found = [v for d in found if isinstance(d, dict) for v in d.values()]
            i += 1 if kw == "additionalProperties" else 2
        elif kw == "prefixItems" and arg is not None and arg.isdigit():
            k = int(arg)
            found, i = [d[k] for d in found if isinstance(d, list) and k < len(d)], i + 2
        elif kw == "items":
            found, i = [v for d in found if isinstance(d, list) for v in d], i + 1
        else:
            return []
    return found


def _applied(schema: dict, pointers: list[str], change) -> tuple[dict, list[str]] | None:
    """A copy of `schema` with `change(node, pointer)` applied at each pointer that names a
    node (`change` returns False where it does not apply), and the pointers it changed;
    None when nothing changed."""
    s, changed = copy.deepcopy(schema), []
    for ptr in pointers:
        node = _node_at(s, ptr)
        if node is not None and change(node, ptr):
            changed.append(ptr)
    return (s, changed) if changed else None


def advice_variants(schema: dict, causes: list[dict], texts: list[str]) -> list[tuple[str, dict]]:
    """Each named cause's advice applied at the places it names, as (label, schema): a
    `maxLength` from what the samples wrote on free-text strings, tight bounds on numbers,
    a fixed length on arrays. Each narrows the schema; what it rejects is measured."""
    docs = _parsed(texts)
    by_cause = {c["cause"]: [p for p in c["places"] if p.startswith("/")] for c in causes}
    out: list[tuple[str, dict | None]] = []

    def where(ptrs: list[str]) -> str:
        return ", ".join(ptrs[:3]) + (" …" if len(ptrs) > 3 else "")

    def max_length(node: dict, ptr: str) -> bool:
        lens = [len(v) for v in _values_at(docs, ptr) if isinstance(v, str)]
        if "format" in node:  # fsm cannot enforce maxLength with a format: not advice
            return False
        if not lens or node.get("maxLength", 10**9) <= max(lens):
            return False
        node["maxLength"] = max(lens)
        return True

    def bounds(node: dict, ptr: str) -> bool:
        nums = [v for v in _values_at(docs, ptr) if isinstance(v, int | float)]
        if not nums or node.get("type") != "integer":
            return False
        if (node.get("minimum"), node.get("maximum")) == (min(nums), max(nums)):
            return False
        node["minimum"], node["maximum"] = min(nums), max(nums)
        return True

    def fixed_length(node: dict, ptr: str) -> bool:
        lens = [len(v) for v in _values_at(docs, ptr) if isinstance(v, list)]
        if not lens or node.get("type") != "array":
            return False
        n = Counter(lens).most_common(1)[0][0] if "maxItems" not in node else node["maxItems"]
        if node.get("minItems") == n == node.get("maxItems"):
            return False
        node["minItems"] = node["maxItems"] = n
        return True

    # no enum of the samples' values for free text, no const for alternatives: they would
    # change what the schema means (a title or a whole document made one of 6 synthesized
    # samples), which is not advice for speed; bounds are, said to narrow the schema
    for cause, label, change in (
        ("free_text", "maxLength = the longest value the samples wrote at", max_length),
        ("numbers", "minimum/maximum = the samples' range at", bounds),
        ("array_lengths", "minItems = maxItems (the samples' usual length) at", fixed_length),
    ):
        ptrs = by_cause.get(cause) or []
        if cause == "array_lengths":  # the choice sits after an item: its array is the parent
            ptrs = list(dict.fromkeys(p.removesuffix("/items") or "/" for p in ptrs))
        fixed = _applied(schema, ptrs, change) if ptrs else None
        if fixed is not None:
            out.append((f"{label} {where(fixed[1])}", fixed[0]))
    return out


def _valid(validator, doc) -> bool | None:
    try:
        return validator.is_valid(doc)
    except Exception:  # noqa: BLE001 - an unresolvable $ref, a bad pattern: unknown
        return None


def schema_patch(a, b, pointer: str = "/") -> list[dict]:
    """What turns schema `a` into `b`, node by node: `{"at": pointer, "set": {keyword:
    value}}` for each node whose own keywords changed (what a user edits by hand)."""
    if isinstance(a, dict) and isinstance(b, dict):
        own = {k: v for k, v in b.items() if k not in a or (a[k] != v and not _nested(a[k], v))}
        out = [{"at": pointer, "set": own}] if own else []
        for k, v in b.items():
            if k in a and a[k] != v and _nested(a[k], v):
                out += schema_patch(a[k], v, join(pointer, k))
        return out
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        pairs = enumerate(zip(a, b, strict=True))
        return [x for i, (u, v) in pairs for x in schema_patch(u, v, join(pointer, i))]
    return []


def _nested(u, v) -> bool:
    return (isinstance(u, dict) and isinstance(v, dict)) or (
        isinstance(u, list) and isinstance(v, list) and len(u) == len(v)
    )


def valid_documents(schema: dict, documents: list) -> list:
    """The `documents` (the samples, and the user's own instances) the schema accepts,
    by the jsonschema validator for its draft: what each what-if is checked against."""
    import jsonschema

    before = jsonschema.validators.validator_for(schema)(schema)
    return [d for d in documents if _valid(before, d)]


def meaning_of(schema: dict, changed: dict | None, valid: list) -> dict:
    """Whether a what-if narrows what the schema accepts, and which of the `valid`
    documents (`valid_documents`) it would reject. A change of whitespace or reading
    leaves the schema as it is (`changed` None): it keeps its meaning."""
    if changed is None:
        return {"narrows": False, "meaning": "keeps what the schema accepts"}
    import jsonschema

    after = jsonschema.validators.validator_for(changed)(changed)
    rejected = [d for d in valid if _valid(after, d) is False]
    out = {
        "narrows": True,
        "patch": schema_patch(schema, changed),
        "rejects": {"checked": len(valid), "rejected": len(rejected)},
    }
    if rejected:
        out["rejects"]["example"] = json.dumps(rejected[0], ensure_ascii=False)[:200]
        out["meaning"] = (
            f"narrows the schema: rejects {len(rejected)} of the {len(valid)} valid documents given"
        )
    else:
        out["meaning"] = (
            f"narrows the schema (none of the {len(valid)} valid documents given is rejected)"
        )
    return out


def _reserialize(text: str, ws: str, schema: dict | None = None) -> str | None:
    try:
        return dump_as_generated(json.loads(text), schema, ws)
    except ValueError:
        return None


def _schema_what_ifs(
    constraint: Constraint,
    texts: list[str],
    res: dict,
    ctx: tuple,
    causes: list[dict],
    automaton: Automaton = None,
    budget_s: float = 15.0,
    instances: list | None = None,
) -> list[dict]:
    """The mechanical suggestions applied, each measured (`_measure_what_if`; `ctx`:
    tokenizer, token bytes, n, seed, threshold, whether the samples are synthesized), with
    a verdict: every named cause's own advice at its places first, then the general ones.
    Each changed schema's automaton comes from `automaton(constraint, seconds)`, all of
    them within `budget_s`; what the budget leaves out says so. Each says whether it
    narrows the schema and which valid documents (samples, `instances`) it rejects."""
    automaton = automaton or local_automaton
    what_if: list[dict] = []
    schema = parse_schema(constraint.text)
    valid = valid_documents(schema, [*_parsed(texts), *(instances or [])])
    spec, ws0 = constraint.spec, constraint.whitespace
    variants = [
        (label, json.dumps(fixed), ws0, fixed, spec)
        for label, fixed in advice_variants(schema, causes, texts)
    ]
    if ws0 == "flexible":
        variants.append(("compact separators", constraint.text, "compact", None, spec))
    fixed = _what_if_schema(schema, "required_ordered")
    if fixed is not None:
        variants.append(
            (
                "required and ordered properties, additionalProperties: false",
                json.dumps(fixed),
                ws0,
                fixed,
                spec,
            )
        )
    arr = _what_if_schema(schema, "fixed_arrays")
    if arr is not None:
        variants.append(
            ("fixed array lengths (minItems = maxItems)", json.dumps(arr), ws0, arr, spec)
        )
    variants.append(
        (
            "generation's reading (closed objects, one spelling per number)"
            if spec
            else "JSON Schema's own reading (--spec: open objects, 1.0 as an integer)",
            constraint.text,
            ws0,
            None,
            not spec,
        )
    )
    deadline = time.monotonic() + budget_s
    for label, text, ws, sch, spec2 in variants:
        meaning = meaning_of(schema, sch, valid)
        left = deadline - time.monotonic()
        if left <= 0:
            error = f"not measured: the what-ifs' {budget_s:g} s were spent"
            what_if.append({"change": label, "error": error, **meaning})
            continue
        try:
            c2 = Constraint("schema", text, ws, constraint.lenient, spec=spec2)
            dfa2 = automaton(c2, left)
        except CfsmError as exc:
            what_if.append({"change": label, "error": exc.message, **meaning})
            continue
        got = _measure_what_if(label, ws, sch, dfa2, texts, res, ctx)
        got["advice"] += f"; {meaning['meaning']}"
        what_if.append({**got, **meaning})
    return what_if


def _parsed(texts: list[str]) -> list:
    out = []
    for t in texts:
        try:
            out.append(json.loads(t))
        except ValueError:
            continue
    return out


def local_automaton(c: Constraint, timeout_s: float) -> CharDFA:
    """A what-if's automaton in this process, within the regex budget and the state limit
    but with no time limit (`cfsm doctor` without an engine); the engine passes its compile
    cache instead: a killable worker that stops at `timeout_s`."""
    return build_char_dfa(c.regex() or "", max_chars=c.max_regex_chars)


# A what-if whose ideal moves by less than this share of its value is within what another
# set of samples of the same constraint gives, and is reported as no clear change. Measured
# (`cfsm doctor --seed 0..5`, 8 synthesized samples): the order preset 1.44-1.50x flexible
# and 2.79-3.04x compact, a title/tags schema 1.11-1.14x: up to 4.3% around the mean.
WHAT_IF_NOISE = 0.05
NO_CLEAR_CHANGE = "does not clearly change"


def _measure_what_if(label, ws, sch, dfa2, texts, res, ctx) -> dict:
    """The changed constraint measured as the doctor measures any constraint, so that the
    figure lines up with diagnosing the change itself: fresh synthesized samples (same
    count and seed) when the report's samples are synthesized, the same documents
    re-serialized when they came from the model (and stay valid); the other reading is
    given too where there is one."""
    tokenizer, token_bytes, n, seed, threshold, synthesized = ctx
    same = [t2 for t2 in (_reserialize(t, ws, sch) for t in texts) if t2 and dfa2.accepts(t2)]
    fresh = analyse_samples(
        dfa2, synthesize(dfa2, n, seed), tokenizer, token_bytes, True, threshold
    )
    kept = (
        analyse_samples(dfa2, same, tokenizer, token_bytes, True, threshold)
        if len(same) == len(texts)
        else None
    )
    main = fresh if synthesized or kept is None else kept
    note = (
        "fresh synthesized samples, as `cfsm doctor` on the changed constraint"
        if main is fresh
        else "the same documents, re-serialized"
    )
    before, after = res["ideal_reduction"], main["ideal_reduction"]
    verdict = _verdict(before, after)
    out = {
        "change": label,
        "whitespace": ws,
        "ideal_reduction_before": before,
        "ideal_reduction_after": after,
        "samples": main["samples"],
        "note": note,
        "verdict": verdict,
        "advice": f"this change {verdict} the ideal speedup ({before}x -> {after}x"
        + (", within the samples' noise)" if verdict == NO_CLEAR_CHANGE else ")")
        + (": not recommended for speed" if verdict == "lowers" else ""),
    }
    other = kept if main is fresh else fresh
    if other is not None:
        which = "the same documents re-serialized" if other is kept else "fresh samples"
        out["note"] += f"; on {which}: {other['ideal_reduction']}x"
    return out


def _verdict(before: float, after: float) -> str:
    if abs(after - before) <= WHAT_IF_NOISE * max(before, 1e-9):
        return NO_CLEAR_CHANGE
    return "raises" if after > before else "lowers"
