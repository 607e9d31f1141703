"""JSON Schema -> regex, exact for what it accepts: every string the regex matches is a
document the schema accepts (checked keyword by keyword by the conformance benchmark).
A keyword that cannot be enforced in a regular language is refused with
`unsupported_feature` naming it and its JSON pointer, or, when the caller is lenient,
skipped with a warning that travels with the compiled constraint.

Choices that make the language smaller than the schema's (documented in the README):
objects that list `properties` are closed unless `additionalProperties` says otherwise,
and each number has one spelling (`1`, never `1.0`, for an integer), unless `spec` asks
for JSON Schema's own reading; keys come in the schema's order, numbers with bounds have
no exponent, and nesting of untyped values and of recursive `$ref`s stops at a stated
depth."""

from __future__ import annotations

import itertools
import json
import re
from dataclasses import dataclass, field

from ..errors import CfsmError
from ..lazy import lazy_module
from ..regex.algebra import TooLarge
from .budget import LoweringBudget
from .dependencies import DependencyKeywords
from .ecma import ecma_schema
from .formats import FORMATS
from .numbers import (
    JSON_NUMBER,
    NumberKeywords,
    alt,
    number_spellings,
)
from .objects import ObjectCompiler
from .pointer import defining_pointer, join_raw, resolve
from .refs import RefResolver, json_equal, merge_all
from .strings import ANY_STRING, CHAR, RAW, PatternTranslator, intersect_contents, width_of
from .whitespace import WhitespacePolicy

jsonschema = lazy_module("jsonschema")

ANY_DEPTH = 1  # nesting of values a schema leaves untyped
REF_DEPTH = 3  # how many times one recursive $ref is expanded
TYPES = ("null", "boolean", "object", "array", "string", "integer", "number")


@dataclass
class Separators:
    """Where whitespace goes, by the run's policy."""

    item: str = ","
    key: str = ":"
    open_pad: str = ""

    written: tuple[str, str] = (",", ":")  # the separators a literal value is spelt with

    @classmethod
    def of(cls, policy: str) -> Separators:
        ws = WhitespacePolicy.of(policy)
        if ws.flexible:
            pad = ws.pattern
            return cls(f"{pad},{pad}", f"{pad}:{pad}", pad, ws.separators)
        return cls(ws.item, ws.key, "", ws.separators)

    def dumps(self, value) -> str:
        """A value as the regex for its one spelling under this policy."""
        return re.escape(
            json.dumps(value, separators=self.written, ensure_ascii=False, allow_nan=False)
        )

    def obj(self, body: str) -> str:
        return r"\{" + self.open_pad + body + self.open_pad + r"\}"

    def arr(self, body: str) -> str:
        return r"\[" + self.open_pad + body + self.open_pad + r"\]"


@dataclass
class SchemaRegex:
    regex: str
    warnings: list[str] = field(default_factory=list)


class SchemaCompiler(NumberKeywords, DependencyKeywords):
    """One compile of one schema; holds the root (for $ref), the policy and the warnings."""

    def __init__(
        self,
        root: dict | bool,
        whitespace: str = "compact",
        lenient: bool = False,
        spec: bool = False,
        budget: LoweringBudget | None = None,
    ) -> None:
        self.root = root
        self.sep = Separators.of(whitespace)
        self.lenient = lenient
        self.spec = spec  # open objects, integers also as `1.0` (see the module docstring)
        self.draft4 = isinstance(root, dict) and bool(
            re.search(r"draft-0[34]/", str(root.get("$schema", "")))
        )
        self.warnings: list[str] = []
        self.refs = RefResolver(root, REF_DEPTH)
        self.budget = budget or LoweringBudget()
        self.budget.place = self.place
        self._by_ref: dict[tuple, str | None] = {}  # a $ref lowered once per recursion path
        self._validator = None  # the document's JSON Schema validator (`validator`)
        self._empty_at = ""  # the last subschema that admitted no value (`compile` names it)
        self.empty_why = ""  # why a subschema admitted none, where a part knows (objects.py)

    def compile(self) -> SchemaRegex:
        try:
            rx = self.node(self.root, "")
        except RecursionError:
            raise CfsmError(
                "unsupported_feature",
                "the schema nests (or refers to itself) too deeply to turn into a regex",
            ) from None
        if rx is None:
            where = f" (nothing can be written at {self._empty_at})" if self._empty_at else ""
            where += f": {self.empty_why}" if self.empty_why else ""
            raise CfsmError(
                "unsatisfiable",
                f"the schema admits no document that this compiler can produce{where}",
            )
        return SchemaRegex(rx, self.warnings)

    def place(self, ptr: str) -> str:
        """A walked path as the place the raw schema has (schema.pointer.defining_pointer)."""
        return defining_pointer(self.refs.root, ptr or "/")

    def refuse(self, keyword: str, ptr: str, why: str) -> None:
        """A keyword that cannot be enforced: an error, or with lenient a warning."""
        root = self.refs.root
        where = defining_pointer(root, join_raw(ptr, keyword))
        if not resolve(root, where)[0]:  # a keyword the lowering made (a $ref's merge)
            where = defining_pointer(root, ptr or "/")
        if not self.lenient:
            raise CfsmError(
                "unsupported_feature",
                f"`{keyword}` at {where} cannot be enforced on the regex path: {why} "
                "(--lenient compiles it unenforced with a warning; xgrammar or llguidance may "
                "support it)",
            )
        self.warnings.append(f"`{keyword}` at {where} is NOT enforced: {why}")

    # -- dispatch ----------------------------------------------------------------
    def node(self, s, ptr: str) -> str | None:
        """The regex of the value `s` describes, within the lowering's budget."""
        self.budget.check(ptr)
        if s is True or s == {}:
            return self.any_value(ANY_DEPTH)
        if s is False:
            return None
        if not isinstance(s, dict):
            raise CfsmError("invalid_schema", f"schema at {ptr or '/'} is not an object or boolean")
        key = _ref_key(s, self.refs.stack)
        if key is not None and key in self._by_ref:
            return self._by_ref[key]  # the same $ref on the same path: the same regex
        with self.refs.entering(s, ptr) as (s, ptr):
            if s is None or s is False:
                rx = None
            elif s is True:
                rx = self.any_value(ANY_DEPTH)
            else:
                rx = self._node(s, ptr)
        if rx is not None:
            self.budget.charge(len(rx), ptr)
        elif ptr and s is not False:
            self._empty_at = ptr  # the last one done is on the root's path: says where
        if key is not None:
            self._by_ref[key] = rx
        return rx

    def _node(self, s: dict, ptr: str) -> str | None:
        finite = self.finite_values(s, ptr)
        if finite is not None:  # every other keyword checks these values: none is refused
            return self.enumerated(s, ptr, finite)
        s = self.flatten_all_of(self.optional_dependencies(dict(s)), ptr)
        if s is None:
            return None
        self.refuse_unhandled(s, ptr)
        if "enum" in s or "const" in s:
            return self.enumerated(s, ptr, self.finite_values(s, ptr))
        if "anyOf" in s:
            return self.any_of(s, ptr)
        if "oneOf" in s:
            return self.one_of(s, ptr)
        return alt([self.typed(t, s, ptr) for t in self.types(s, ptr)])

    def types(self, s: dict, ptr: str) -> list[str]:
        t = s.get("type")
        if t is None:
            return [t for t in TYPES if t != "integer"]  # numbers include the integers
        ts = [t] if isinstance(t, str) else list(t)
        if "number" in ts and "integer" in ts:
            ts.remove("integer")
        return ts

    def typed(self, t: str, s: dict, ptr: str) -> str | None:
        if t == "null":
            return "null"
        if t == "boolean":
            return "(true|false)"
        if t in ("integer", "number"):
            return self.number(s, ptr, integer=(t == "integer"))
        if t == "string":
            return self.string(s, ptr)
        if t == "array":
            return self.array(s, ptr)
        return self.object(s, ptr)

    def refuse_unhandled(self, s: dict, ptr: str) -> None:
        """Keywords with no regex form: refuse unless they cannot change the language."""
        trivial = {"uniqueItems": False}
        for kw in (
            "not",
            "if",
            "then",
            "else",
            "$dynamicRef",
            "$recursiveRef",
            "unevaluatedItems",
            "contains",
            "dependentSchemas",
            "uniqueItems",
            "dependencies",
        ):
            if (
                kw in s
                and not (kw in trivial and s[kw] == trivial[kw])
                and not self._vacuous(kw, s)
            ):
                self.refuse(kw, ptr, "it has no regular-language form here")
        if "dependentRequired" in s:
            self.dependent_required(s, ptr)

    def _vacuous(self, kw: str, s: dict) -> bool:
        if kw in ("then", "else"):
            return "if" not in s
        if kw == "uniqueItems":
            return s.get("maxItems", 2) <= 1 or (
                s.get("items") is False and len(s.get("prefixItems", [])) <= 1
            )
        if kw == "unevaluatedItems":
            return s[kw] is True
        return False

    # -- combinators -------------------------------------------------------------
    def refuse_unevaluated_across(self, s: dict, ptr: str) -> dict:
        """`unevaluated*` sees what in-place applicators (allOf/anyOf/oneOf/$ref) evaluated;
        merging them would change that, so those combinations are refused."""
        members = [x for k in ("allOf", "anyOf", "oneOf") for x in (s.get(k) or [])]
        if not members or not any(_has_unevaluated(x) for x in [s, *members]):
            return s
        kw = (
            "unevaluatedProperties"
            if any(_has_unevaluated(x, "unevaluatedProperties") for x in [s, *members])
            else "unevaluatedItems"
        )
        self.refuse(
            kw, ptr, "it depends on what sibling applicators (allOf/anyOf/oneOf/$ref) evaluate"
        )
        return _drop_unevaluated(s)

    def flatten_all_of(self, s: dict, ptr: str) -> dict | None:
        s = self.refuse_unevaluated_across(s, ptr)
        if "allOf" not in s:
            return s
        parts = []
        for i, sub in enumerate(s["allOf"]):
            sub = self.refs.inline(sub, join_raw(ptr, f"allOf/{i}"))
            if sub is False:
                return None
            if sub is True:
                continue
            parts.append(sub)
        rest = {k: v for k, v in s.items() if k != "allOf"}
        merged, conflict = merge_all([rest, *parts])
        if conflict:
            self.refuse("allOf", ptr, conflict)
            return rest
        return self.flatten_all_of(merged, ptr) if "allOf" in merged else merged

    def any_of(self, s: dict, ptr: str, kw: str = "anyOf", at: list[int] | None = None):
        """The branches' alternation; `kw` and `at` name them as the schema writes them (a
        `oneOf` lowered here: its keyword and each branch's own index)."""
        rest = {k: v for k, v in s.items() if k != "anyOf"}
        branches = []
        for i, sub in enumerate(s["anyOf"]):  # a $ref stays for node(), which bounds recursion
            if sub is False:
                continue
            merged, conflict = merge_all([rest, {} if sub is True else sub])
            if conflict:
                self.refuse(kw, ptr, conflict)
                return self.node(rest, ptr)
            branches.append(self.node(merged, join_raw(ptr, f"{kw}/{at[i] if at else i}")))
        return alt(branches)

    def one_of(self, s: dict, ptr: str) -> str | None:
        subs = [
            self.refs.inline(sub, join_raw(ptr, f"oneOf/{i}")) for i, sub in enumerate(s["oneOf"])
        ]
        at = [i for i, x in enumerate(subs) if x is not False]
        live = [subs[i] for i in at]
        if len(live) > 1 and not _pairwise_disjoint(live):
            self.refuse(
                "oneOf",
                ptr,
                "its branches may overlap (only branches of different types, or "
                "objects told apart by a required `const`/`enum` property, are exact)",
            )
        rest = {k: v for k, v in s.items() if k != "oneOf"}
        return self.any_of({**rest, "anyOf": live}, ptr, "oneOf", at)

    def finite_values(self, s: dict, ptr: str) -> list | None:
        """The values a node may take when an `enum` or `const` lists them, on the node or
        in one of its `allOf` members (before any other keyword is read)."""
        for node in [s, *(s.get("allOf") or [])]:
            if isinstance(node, dict) and ("enum" in node or "const" in node):
                values = [node["const"]] if "const" in node else list(node["enum"])
                if "const" in node and "enum" in node:
                    values = [v for v in values if any(json_equal(v, e) for e in node["enum"])]
                return values
        return None

    def enumerated(self, s: dict, ptr: str, values: list) -> str | None:
        """The listed values that are valid for the whole node (every keyword beside them,
        `not`, `uniqueItems`, `dependencies`, references resolved in the document), checked
        by the JSON Schema validator of the document's draft: exact, whatever they are."""
        listed = [x for x in [s, *(s.get("allOf") or [])] if isinstance(x, dict)]
        kw = "enum" if any("enum" in x for x in listed) else "const"
        try:
            check = self.validator().evolve(schema=ecma_schema(s))
            keep = [v for v in values if check.is_valid(v)]
        except Exception as exc:  # noqa: BLE001 - a validator failure is a refusal, not a crash
            self.refuse(kw, ptr, f"its values cannot be checked against the rest ({exc})")
            keep = values
        out = []
        for v in keep:
            try:
                out.append(self.value(v))
            except ValueError:
                continue
        return alt(out)

    def validator(self):
        """The document's JSON Schema validator (its draft; patterns read as ECMA-262),
        built once: a subschema checked with it resolves `$ref`s in the document."""
        if self._validator is None:
            root = ecma_schema(self.refs.root)
            self._validator = jsonschema.validators.validator_for(root)(root)
        return self._validator

    # -- scalars -----------------------------------------------------------------
    def value(self, v) -> str:
        """A const/enum value as a regex: generation's one spelling, or with `spec` also the
        spellings that differ by trailing zeros (`1.0` and `1.00` for 1 up to 15 digits,
        `1.50` for 1.5) and a small object's keys in any order (not `1e0` or `-0`)."""
        if not self.spec:
            return self.sep.dumps(v)
        if isinstance(v, bool) or v is None or isinstance(v, str):
            return self.sep.dumps(v)
        if isinstance(v, (int, float)):
            return number_spellings(v, self.sep)
        if isinstance(v, list):
            return self.sep.arr(self.sep.item.join(self.value(x) for x in v))
        members = [
            re.escape(json.dumps(k, ensure_ascii=False)) + self.sep.key + self.value(x)
            for k, x in v.items()
        ]
        orders = itertools.permutations(members) if len(members) <= 4 else [members]
        return self.sep.obj(alt([self.sep.item.join(o) for o in orders]) or "")

    def string(self, s: dict, ptr: str) -> str | None:
        """A string's content: its `format`, its `pattern`s (an `allOf` of several merges
        them as a list) and its length bounds, each a regular language over the content as
        JSON spells it, so where more than one applies the string is their intersection
        (engine.regex.algebra), exact; past the product's limits the keyword is refused."""
        lo, hi = int(s.get("minLength", 0)), s.get("maxLength")
        hi = None if hi is None else int(hi)
        if hi is not None and hi < lo:
            return None
        fmt, pattern = s.get("format"), s.get("pattern")
        if fmt is not None and fmt not in FORMATS:
            self.refuse("format", ptr, f"format {fmt!r} is not one of {', '.join(FORMATS)}")
            fmt = None
        patterns = [] if pattern is None else pattern if isinstance(pattern, list) else [pattern]
        parts = [FORMATS[fmt]] if fmt else []
        where = self.place(join_raw(ptr, "pattern"))
        parts += [PatternTranslator(p, where).translate()[0] for p in patterns]
        if not parts:
            return '"' + _counted(CHAR, lo, hi) + '"'
        if len(parts) > 1:
            parts = [self.intersection(parts, "pattern", ptr, "a `pattern` with a `format` or "
                                       "another `pattern`")]  # fmt: skip
            if parts[0] is None:
                return None
        width = width_of(parts[0])
        if (lo or hi is not None) and not (width[0] >= lo and (hi is None or width[1] <= hi)):
            if width[1] < lo or (hi is not None and width[0] > hi):
                return None
            kw = "maxLength" if hi is not None else "minLength"
            body = self.intersection([parts[0], _counted(CHAR, lo, hi)], kw, ptr,
                                     "length bounds with a pattern or format")  # fmt: skip
            return None if body is None else '"' + body + '"'
        return '"' + parts[0] + '"'

    def intersection(self, regexes: list[str], keyword: str, ptr: str, what: str):
        """The regex of strings every one of `regexes` matches (None: none does); past the
        product automaton's limits `keyword` is refused and the first regex kept (lenient:
        the rest unenforced)."""
        try:
            return intersect_contents(regexes)
        except TooLarge as exc:
            self.refuse(keyword, ptr, f"{what}: their intersection is past its limits ({exc})")
            return regexes[0]

    # -- containers ----------------------------------------------------------------
    def array(self, s: dict, ptr: str) -> str | None:
        lo, hi = int(s.get("minItems", 0)), s.get("maxItems")
        hi = None if hi is None else int(hi)
        prefix = [
            self.node(x, join_raw(ptr, f"prefixItems/{i}"))
            for i, x in enumerate(s.get("prefixItems", []))
        ]
        items = s.get("items", True)
        rest = None if items is False else self.node(items, join_raw(ptr, "items"))
        if None in prefix:
            cut = prefix.index(None)
            prefix, rest = prefix[:cut], None
        if rest is None:
            hi = len(prefix) if hi is None else min(hi, len(prefix))
        if hi is not None and (hi < lo):
            return None
        prefix = prefix[:hi] if hi is not None else prefix
        return self.sep.arr(_sequence(prefix, rest, lo, hi, self.sep.item) or "")

    def object(self, s: dict, ptr: str) -> str | None:
        return ObjectCompiler(self, s, ptr).regex()

    def any_value(self, depth: int) -> str:
        scalars = f"(null|true|false|{JSON_NUMBER}|{ANY_STRING})"
        if depth <= 0:
            return scalars
        inner = self.any_value(depth - 1)
        arr = self.sep.arr(f"({inner}({self.sep.item}{inner})*)?")
        key = '"' + RAW + '*"'
        member = f"{key}{self.sep.key}{inner}"
        obj = self.sep.obj(f"({member}({self.sep.item}{member})*)?")
        return f"({scalars[1:-1]}|{arr}|{obj})"


def _ref_key(s: dict, stack: list) -> tuple | None:
    """A plain `{"$ref": ...}` (nothing beside it) lowers alike wherever it is met with the
    same references being expanded around it: its memo key; None for any other node."""
    ref = s.get("$ref")
    if not isinstance(ref, str) or len(s) != 1:
        return None
    return (ref, tuple(stack))


def _sequence(prefix: list[str], rest: str | None, lo: int, hi: int | None, sep: str) -> str | None:
    """Array body: prefix items then `rest` items, with lo..hi elements in all."""
    k = len(prefix)
    tail = ""
    if rest is not None and (hi is None or hi > k):
        a, b = max(lo - k, 0), None if hi is None else hi - k
        if k == 0:
            if b == 0:
                tail = ""
            else:
                first = rest + _counted(
                    f"({sep}{rest})", max(a - 1, 0), None if b is None else b - 1
                )
                return first if a >= 1 else f"({first})?"
        else:
            tail = _counted(f"({sep}{rest})", a, b)
    elif lo > k:
        return None
    body = tail
    for i in range(k - 1, -1, -1):
        piece = (sep if i else "") + prefix[i] + body
        body = piece if i < lo else f"({piece})?"
    return body


def _counted(unit: str, lo: int, hi: int | None) -> str:
    if hi is None:
        return unit + ("*" if lo == 0 else "+" if lo == 1 else f"{{{lo},}}")
    if hi == 0:
        return ""
    return unit + (
        "?"
        if (lo, hi) == (0, 1)
        else ""
        if lo == hi == 1
        else f"{{{lo}}}"
        if lo == hi
        else f"{{{lo},{hi}}}"
    )


def _inf(n: int) -> str:
    return "unbounded" if n >= 2**31 else str(n)


def _has_unevaluated(s, kw: str | None = None) -> bool:
    if not isinstance(s, dict):
        return False
    kws = (kw,) if kw else ("unevaluatedProperties", "unevaluatedItems")
    return any(k in s and s[k] is not True for k in kws)


def _drop_unevaluated(s):
    if isinstance(s, dict):
        out = {
            k: _drop_unevaluated(v)
            for k, v in s.items()
            if k not in ("unevaluatedProperties", "unevaluatedItems")
        }
        return out
    if isinstance(s, list):
        return [_drop_unevaluated(x) for x in s]
    return s


def _type_set(s) -> set[str]:
    if not isinstance(s, dict) or "type" not in s:
        if isinstance(s, dict) and ("const" in s or "enum" in s):
            vals = [s["const"]] if "const" in s else s["enum"]
            return {_json_type(v) for v in vals}
        return set(TYPES)
    t = s["type"]
    ts = {t} if isinstance(t, str) else set(t)
    if "number" in ts:
        ts.add("integer")
    return ts


def _json_type(v) -> str:
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "boolean"
    if isinstance(v, (int, float)):
        return "number"
    return {str: "string", list: "array", dict: "object"}[type(v)]


def _tags(s) -> dict[str, list]:
    """Required properties with const/enum values: what tells tagged-union branches apart."""
    if not isinstance(s, dict):
        return {}
    req = set(s.get("required", []))
    out = {}
    for k, sub in (s.get("properties") or {}).items():
        if k in req and isinstance(sub, dict) and ("const" in sub or "enum" in sub):
            out[k] = [sub["const"]] if "const" in sub else list(sub["enum"])
    return out


def _pairwise_disjoint(subs: list) -> bool:
    for i in range(len(subs)):
        for j in range(i + 1, len(subs)):
            a, b = subs[i], subs[j]
            if not isinstance(a, dict) or not isinstance(b, dict):
                return False
            ta, tb = _type_set(a), _type_set(b)
            if "number" in ta or "number" in tb:
                ta, tb = (
                    ta | ({"integer"} if "number" in ta else set()),
                    tb | ({"integer"} if "number" in tb else set()),
                )
            if not (ta & tb):
                continue
            if ta & tb == {"object"} and _tags_disjoint(_tags(a), _tags(b)):
                continue
            if ("const" in a or "enum" in a) and ("const" in b or "enum" in b):
                va = [a["const"]] if "const" in a else a["enum"]
                vb = [b["const"]] if "const" in b else b["enum"]
                if not any(json_equal(x, y) for x in va for y in vb):
                    continue
            return False
    return True


def _tags_disjoint(a: dict, b: dict) -> bool:
    return any(not any(json_equal(x, y) for x in a[k] for y in b[k]) for k in set(a) & set(b))


def schema_regex(
    schema: dict | bool, whitespace: str = "compact", lenient: bool = False, spec: bool = False
) -> SchemaRegex:
    return SchemaCompiler(schema, whitespace, lenient, spec).compile()


__all__ = ["SchemaRegex", "Separators", "schema_regex"]
