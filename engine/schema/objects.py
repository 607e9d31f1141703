"""Objects for the schema compiler: listed properties in the schema's order (required or
optional), then extra keys where the schema allows them and a regex can keep them exact."""

from __future__ import annotations

import itertools
import json
import re

from ..errors import CfsmError
from ..lazy import lazy_module
from ..regex.algebra import TooLarge, combine
from .ecma import ecma_schema, to_python
from .numbers import alt
from .pointer import escape, join_raw
from .refs import merge_all
from .strings import RAW, PatternTranslator, literal_text

jsonschema = lazy_module("jsonschema")


def key_not_in(words: set[str]) -> str:
    """Regex for a JSON string of plain characters that is none of `words` (so an extra
    key never repeats a listed one, whose value has its own schema)."""
    trie: dict = {}
    for w in words:
        node = trie
        for ch in w:
            node = node.setdefault(ch, {})
        node[""] = {}

    def below(node: dict) -> str:
        kids = sorted(k for k in node if k)
        parts = [] if "" in node else [""]
        if kids:
            others = "".join(re.escape(k) if k not in "]\\^-[" else "\\" + k for k in kids)
            parts.append(f'[^"\\\\\\x00-\\x1f{others}]{RAW}*')
            parts += [
                re.escape(k) + below(node[k]) for k in kids if k not in '"\\' and ord(k) >= 0x20
            ]
        else:
            parts.append(f"{RAW}+")
        return "(" + "|".join(parts) + ")" if len(parts) > 1 else parts[0]

    return '"' + below(trie) + '"'


def extra_schema_of(s: dict, spec: bool = False):
    """The schema an unlisted key's value gets, or False when the object is closed: an
    object that lists `properties` (or patterns) is closed unless it says otherwise, or
    unless `spec` (JSON Schema's reading, where only `additionalProperties` closes)."""
    ap = s.get("additionalProperties")
    if ap is None and "unevaluatedProperties" in s:
        ap = s[
            "unevaluatedProperties"
        ]  # no applicators here (refused upstream): the same as additionalProperties
    if ap is None:
        return (
            True if spec or (not s.get("properties") and not s.get("patternProperties")) else False
        )
    return ap


class ObjectCompiler:
    def __init__(self, c, s: dict, ptr: str) -> None:
        self.c, self.s, self.ptr = c, s, ptr
        self.sep = c.sep
        self.props = dict(s.get("properties") or {})
        self.required = list(dict.fromkeys(s.get("required") or []))
        self.patterns = dict(s.get("patternProperties") or {})
        self.extra_schema = extra_schema_of(s, c.spec)

    def regex(self) -> str | None:
        names = self.listed_names()
        if names is None:
            return None
        members = []
        for name in names:
            value = self.c.node(self.value_schema(name), self.name_at(name))
            required = name in self.required
            if value is None:
                if required:
                    return None
                continue
            members.append(
                (
                    re.escape('"') + literal_text(name) + re.escape('"') + self.sep.key + value,
                    required,
                )
            )
        n_req = sum(1 for _, r in members if r)
        extra = self.extra_member(set(names))
        lo_count, hi_count = self.counts(n_req, len(members), extra is not None)
        if lo_count is None:
            return None
        if hi_count is not None and extra is not None:
            room = hi_count - len(members)
            extra = extra if room > 0 else None
        return self.sep.obj(
            self.body(members, extra, None if hi_count is None else hi_count - len(members)) or ""
        )

    def listed_names(self) -> list[str] | None:
        """Properties in schema order, then required names the schema does not list (they
        take the value schema an unlisted key gets); None when a required name cannot exist."""
        names = list(self.props)
        for r in self.required:
            if r not in self.props:
                if self.extra_schema is False and not any(
                    self.matches(p, r) for p in self.patterns
                ):
                    self.c.empty_why = (
                        f"`required` at {join_raw(self.ptr, 'required')} names {r!r}, which the "
                        "object does not list and does not let in (objects that list properties "
                        "are closed in generation's reading: the Spec reading opens them)"
                    )
                    return None
                names.append(r)
        pn = self.s.get("propertyNames")
        if pn is not None and pn is not True:
            if '"$ref"' in json.dumps(pn):
                self.c.refuse(
                    "propertyNames",
                    self.ptr,
                    "it uses a `$ref`, which is not followed for key names",
                )
                return names
            ok = jsonschema.Draft202012Validator(ecma_schema(pn))
            bad = [n for n in names if not ok.is_valid(n)]
            if any(n in self.required for n in bad):
                return None
            names = [n for n in names if n not in bad]
        return names

    def matches(self, pattern: str, name: str) -> bool:
        """Does a listed name match a `patternProperties` pattern (read as ECMA-262)?"""
        try:
            return re.search(to_python(pattern), name) is not None
        except re.error as exc:
            raise CfsmError(
                "unsupported_feature",
                f"`patternProperties` at {self.ptr or '/'}: the pattern "
                f"{pattern!r} does not parse ({exc})",
            ) from None

    def name_at(self, name: str) -> str:
        """Where the schema of a listed name is written: its `properties` entry; for a
        name only `required` lists, the first pattern that matches it, else the object's
        `additionalProperties` or the object itself."""
        if name in self.props:
            return join_raw(self.ptr, f"properties/{escape(name)}")
        for i, p in enumerate(self.patterns):
            if self.matches(p, name):
                return self._at(i)
        if isinstance(self.s.get("additionalProperties"), dict):
            return join_raw(self.ptr, "additionalProperties")
        return self.ptr or "/"

    def value_schema(self, name: str):
        base = self.props.get(name, self.extra_schema if self.extra_schema is not False else True)
        extra = [sub for p, sub in self.patterns.items() if self.matches(p, name)]
        return {"allOf": [base, *extra]} if extra else base

    def extra_member(self, listed: set[str]) -> str | None:
        """One extra `"key": value`, or None when extras are closed or cannot be exact."""
        pn = self.s.get("propertyNames")
        key_sep = self.sep.key
        if pn is not None and pn is not True:
            if listed or self.patterns or self.extra_schema is False or pn is False:
                return None
            key_schema, conflict = merge_all([pn, {"type": "string"}])
            if conflict:
                return None
            key = self.c.node(key_schema, join_raw(self.ptr, "propertyNames"))
            value = self.c.node(self.extra_schema, join_raw(self.ptr, "additionalProperties"))
            return None if key is None or value is None else key + key_sep + value
        if self.patterns:
            return self.pattern_member(listed)
        if self.extra_schema is not False:
            value = self.c.node(self.extra_schema, join_raw(self.ptr, "additionalProperties"))
            return None if value is None else key_not_in(listed) + key_sep + value
        return None

    def pattern_member(self, listed: set[str]) -> str | None:
        """Extra keys by the patterns they match: exact regions where the patterns are few
        (`pattern_regions`), else keys that match some pattern, each value valid
        for every pattern's schema (keys that match none are then not produced). None when
        a listed name matches a pattern (its value has its own)."""
        exact = self.pattern_regions(listed)
        if exact is not None:
            return exact or None
        if any(self.matches(p, n) for p in self.patterns for n in listed):
            return None
        where = self.c.place(join_raw(self.ptr, "patternProperties"))
        bodies = [PatternTranslator(p, where).translate()[0] for p in self.patterns]
        subs = list(self.patterns.values())
        value = self.c.node(subs[0] if len(subs) == 1 else {"allOf": subs}, self._at(0))
        return None if value is None else '"' + alt(bodies) + '"' + self.sep.key + value

    def pattern_regions(self, listed: set[str]) -> str | None:
        """One member per set of patterns a key matches (and, when extra keys are open, per
        key that matches none): its value gets exactly those patterns' schemas. "" when no
        region has a key and a value; None when the patterns are too many or the key
        regexes grow too large (the caller falls back)."""

        pats = list(self.patterns.items())
        if len(pats) > MAX_EXACT_PATTERNS:
            return None
        where = self.c.place(join_raw(self.ptr, "patternProperties"))
        translators = [PatternTranslator(p, where) for p, _ in pats]
        keys = [KEY_UNIVERSE] + [t.translate()[0] for t in translators]
        if not all(
            t.exact for t in translators
        ):  # a narrowed class: its complement would take keys it matches
            return None
        names = alt([literal_text(n) for n in sorted(listed)])  # "" for a listed empty name
        keys += [] if names is None else [names]
        members = []
        for size in range(len(pats) + 1):
            for chosen in itertools.combinations(range(len(pats)), size):
                if not chosen and self.extra_schema is False:
                    continue
                value = (
                    self.c.node(self.extra_schema, join_raw(self.ptr, "additionalProperties"))
                    if not chosen
                    else self.c.node(_all_of([pats[i][1] for i in chosen]), self._at(chosen[0]))
                )
                if value is None:
                    continue
                try:
                    key = combine(keys, _region(set(chosen), len(pats), names is not None))
                except TooLarge:
                    return None
                if key is not None:
                    members.append('"(' + key + ')"' + self.sep.key + value)
        return alt(members) or ""

    def _at(self, i: int) -> str:
        """The pointer of the `i`th pattern's schema (where a value matching several
        patterns gets their merge, the first one's: a node the schema has)."""
        pattern = list(self.patterns)[i]
        return join_raw(self.ptr, "patternProperties/" + escape(pattern))

    def counts(self, n_req: int, n_listed: int, extras: bool) -> tuple[int | None, int | None]:
        """minProperties/maxProperties: (min, max) count, or (None, _) when unsatisfiable."""
        lo, hi = int(self.s.get("minProperties", 0)), self.s.get("maxProperties")
        hi = None if hi is None else int(hi)  # the suite writes 2.0
        if hi is not None and hi < n_req:
            return None, None
        if lo > n_req:
            if not extras and lo > n_listed:
                return None, None
            self.c.refuse(
                "minProperties", self.ptr, f"it asks for more than the {n_req} required properties"
            )
        if hi is not None and hi < n_listed:
            self.c.refuse(
                "maxProperties", self.ptr, f"it allows fewer than the {n_listed} listed properties"
            )
            hi = None
        return lo, hi

    def body(
        self, members: list[tuple[str, bool]], extra: str | None, room: int | None
    ) -> str | None:
        item = self.sep.item
        self.c.budget.charge(_listed_size(members, item), self.ptr)  # before it is built
        listed = _listed(members, item)
        can_be_empty = not any(r for _, r in members)
        if extra is None:
            return (
                alt([listed, "" if can_be_empty else None])
                if listed is not None
                else ("" if can_be_empty else None)
            )
        more = f"({item}{extra})" + ("*" if room is None else f"{{0,{room}}}")
        first = extra + (
            f"({item}{extra})*"
            if room is None
            else (f"({item}{extra}){{0,{room - 1}}}" if room > 1 else "")
        )
        return alt(
            [
                None if listed is None else listed + more,
                first if can_be_empty else None,
                "" if can_be_empty else None,
            ]
        )


# keys in a pattern region are written as JSON writes them: one spelling per key, so the
# complement of a pattern's keys is exact
KEY_UNIVERSE = '([^"\\\\\\x00-\\x1f]|\\\\["\\\\bfnrt]|\\\\u00(0[0-7bef]|1[0-9a-f]))*'
MAX_EXACT_PATTERNS = 3


def _region(chosen: set[int], n: int, has_names: bool):
    def want(bits: tuple[bool, ...]) -> bool:
        return (
            bits[0]
            and all(bits[1 + i] == (i in chosen) for i in range(n))
            and not (has_names and bits[-1])
        )

    return want


def _all_of(subs: list):
    return subs[0] if len(subs) == 1 else {"allOf": subs}


def _listed_size(members: list[tuple[str, bool]], item: str) -> int:
    """The length of `_listed`'s regex, known before it is written: each alternative
    copies every later member (optional ones as `(,x)?`)."""
    total, tail = 0, 0
    sizes = [len(m) for m, _ in members]
    first_required = next((i for i, (_, r) in enumerate(members) if r), len(members) - 1)
    tails = [0] * (len(members) + 1)
    for i in range(len(members) - 1, -1, -1):
        tail = sizes[i] + len(item) + (0 if members[i][1] else 3)
        tails[i] = tails[i + 1] + tail
    for i in range(first_required + 1):
        total += sizes[i] + tails[i + 1] + 1
    return total


def _listed(members: list[tuple[str, bool]], item: str) -> str | None:
    """Non-empty sequences of the listed members in order: each alternative starts at the
    first member present (only optional ones may be skipped before it)."""
    out = []
    for i, (m, req) in enumerate(members):
        tail = "".join((f"{item}{x}" if r else f"({item}{x})?") for x, r in members[i + 1 :])
        out.append(m + tail)
        if req:
            break
    return alt(out)
