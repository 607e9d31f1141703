"""`dependentRequired` and draft-07's `dependencies` (lists) on the regex path, as a mixin
of the schema compiler: a required trigger makes what it requires required; optional
triggers become the cases of which of them are present (exact, 2^n branches for at most
MAX_TRIGGERS triggers)."""

from __future__ import annotations

import itertools

from .objects import extra_schema_of

MAX_TRIGGERS = 3  # optional dependentRequired triggers lowered as cases (2^n branches)


class DependencyKeywords:
    """Needs `spec` and `refuse` from the compiler it is mixed into."""

    spec: bool

    def optional_dependencies(self, s: dict) -> dict:
        """`dependentRequired` (and draft-07's `dependencies` with lists) on optional
        triggers as the cases of which triggers are present: each an `anyOf` branch with
        the absent ones forbidden and the present ones' requirements required (exact; at
        most MAX_TRIGGERS triggers, 2^n branches). Required triggers are left to
        `dependent_required`, schema-valued `dependencies` to the refusal."""
        old = s.get("dependencies")
        deps = dict(s.get("dependentRequired") or {})
        if isinstance(old, dict):
            lists = {k: v for k, v in old.items() if isinstance(v, list)}
            for k, v in lists.items():
                deps[k] = list(dict.fromkeys([*deps.get(k, []), *v]))
            rest = {k: v for k, v in old.items() if k not in lists}
            s = {k: v for k, v in s.items() if k != "dependencies"}
            s |= {"dependencies": rest} if rest else {}
        required, props = set(s.get("required", [])), s.get("properties") or {}
        closed = extra_schema_of(s, self.spec) is False and not s.get("patternProperties")
        optional = {
            t: d
            for t, d in deps.items()
            if t not in required and not set(d) <= {t} and not (closed and t not in props)
        }
        if not optional or len(optional) > MAX_TRIGGERS or "anyOf" in s:
            return {**s, "dependentRequired": deps} if deps else s
        cases = []
        for present in itertools.product((False, True), repeat=len(optional)):
            on = [t for t, p in zip(optional, present, strict=True) if p]
            off = [t for t in optional if t not in on]
            need = list(dict.fromkeys([*on, *(x for t in on for x in optional[t])]))
            cases.append({"properties": {t: False for t in off}, "required": need})
        rest = {t: d for t, d in deps.items() if t not in optional}
        s = {k: v for k, v in s.items() if k != "dependentRequired"}
        return {**s, "anyOf": cases} | ({"dependentRequired": rest} if rest else {})

    def dependent_required(self, s: dict, ptr: str) -> None:
        required = set(s.get("required", []))
        props = s.get("properties", {})
        closed = extra_schema_of(s, self.spec) is False and not s.get("patternProperties")
        for trigger, deps in s["dependentRequired"].items():
            if trigger in required and set(deps) <= required:
                continue
            if closed and trigger not in props:
                continue
            if trigger in required:
                s["required"] = list(
                    dict.fromkeys(list(s.get("required", [])) + list(deps))
                )  # s is _node's copy
                continue
            self.refuse(
                "dependentRequired",
                ptr,
                f"{trigger!r} is optional, so what it requires depends on it",
            )
