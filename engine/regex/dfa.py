"""Character-level DFA of a regex, renumbered canonically.

The automaton is built in engine/regex_automaton.py (positions, subsets, Hopcroft) from
the normalized pattern; interegular builds the same one as a fallback and as the test
oracle. Everything is renumbered in breadth-first order with classes sorted by their
characters: the same regex gives the same ids in every process (traces, caches).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from ..errors import CfsmError
from ..lazy import lazy_module
from ..limits import MAX_REGEX_CHARS
from ..limits import MAX_STATES as DEFAULT_MAX_STATES
from .automaton import Neutral, TooManyStates, Unsupported, build_neutral
from .normalize import normalize_regex  # noqa: F401 - re-exported: backends read regexes through it
from .sets import sre_parse

interegular = lazy_module("interegular")
interegular_fsm = lazy_module("interegular.fsm")


@dataclass
class CharDFA:
    """A minimal-ish DFA over characters with dead states removed.

    `classes[k]` is a sorted string of the characters of class k; `other_class` is the
    index of the class of every character not listed anywhere (interegular's
    anything_else), or None when there is none. `trans[s]` maps class -> next state and
    holds only edges into live states (states that can still reach an accepting state).
    """

    pattern: str
    initial: int
    finals: frozenset[int]
    classes: list[str]
    other_class: int | None
    trans: list[dict[int, int]]
    char_class: dict[str, int] = field(repr=False, default_factory=dict)
    # The automaton as the trace and `cfsm compile` show it (serving.service.automaton_json),
    # built once per automaton and kept with it so the byte-bounded cache counts it.
    view: dict | None = field(repr=False, compare=False, default=None)

    @property
    def num_states(self) -> int:
        return len(self.trans)

    def class_of(self, ch: str) -> int | None:
        k = self.char_class.get(ch)
        return self.other_class if k is None else k

    def step(self, state: int, ch: str) -> int | None:
        """Next state, or None when `ch` leaves the language."""
        k = self.class_of(ch)
        if k is None:
            return None
        return self.trans[state].get(k)

    def walk(self, text: str, state: int | None = None) -> int | None:
        s: int | None = self.initial if state is None else state
        for ch in text:
            if s is None:
                return None
            s = self.step(s, ch)
        return s

    def path(self, text: str) -> list[int]:
        """The states `text` goes through from the initial one, that one included; it
        stops where a character leaves the language (the step view draws the path)."""
        out = [self.initial]
        for ch in text:
            nxt = self.step(out[-1], ch)
            if nxt is None:
                break
            out.append(nxt)
        return out

    def accepts(self, text: str) -> bool:
        s = self.walk(text)
        return s is not None and s in self.finals

    def class_label(self, k: int) -> str:
        """Readable label of a class for graphs (e.g. `[0-9]`, `"`, `[^"\\\\]`)."""
        if k == self.other_class:
            listed = "".join(sorted(self.char_class))
            return "[^" + _compact_chars(listed) + "]" if len(listed) < 12 else "other"
        return self.class_label_of(self.classes[k])

    @staticmethod
    def class_label_of(chars: str) -> str:
        """A set of characters as one label: the character itself, or a class in ranges."""
        if len(chars) == 1:
            return chars
        return "[" + _compact_chars(chars) + "]"

    def to_json(self) -> dict:
        edges = []
        for s, row in enumerate(self.trans):
            for k, t in sorted(row.items(), key=lambda kv: kv[1]):
                edges.append({"from": s, "to": t, "label": self.class_label(k), "class": k})
        return {
            "num_states": self.num_states,
            "initial": self.initial,
            "accepting": sorted(self.finals),
            "transitions": edges,
            # what each class holds, for labels in words (viz/charclass.py); the other class
            # holds every character no class lists
            "classes": [None if k == self.other_class else c for k, c in enumerate(self.classes)],
        }


def _show(ch: str) -> str:
    """A character inside a class label: escaped where it would read as class syntax
    (`[+\\-.]` is three characters, `[+-.]` a range)."""
    if ch in "-]\\^":
        return "\\" + ch
    return ch if ch.isprintable() else ch.encode("unicode_escape").decode()


def _compact_chars(chars: str) -> str:
    """Render a sorted char set with ranges: 0123456789 -> 0-9."""
    cps = sorted({ord(c) for c in chars})
    parts: list[str] = []
    i = 0
    while i < len(cps):
        j = i
        while j + 1 < len(cps) and cps[j + 1] == cps[j] + 1:
            j += 1
        a, b = chr(cps[i]), chr(cps[j])
        if j - i >= 2:
            parts.append(f"{_show(a)}-{_show(b)}")
        else:
            parts.extend(_show(chr(cp)) for cp in cps[i : j + 1])
        i = j + 1
    return "".join(parts)


def _largest_repeat(parsed) -> int:
    """Largest finite counted repeat bound in the pattern (a{1000} needs 1000 states)."""
    best = 0
    for op, av in parsed:
        name = str(op)
        if name in ("MAX_REPEAT", "MIN_REPEAT", "POSSESSIVE_REPEAT"):
            lo, hi, sub = av
            bound = lo if str(hi) == "MAXREPEAT" else hi
            best = max(best, int(bound) * max(1, _largest_repeat(sub)))
        elif name == "SUBPATTERN":
            best = max(best, _largest_repeat(av[-1]))
        elif name == "BRANCH":
            best = max([best] + [_largest_repeat(b) for b in av[1]])
    return best


def _widest_alternation(parsed) -> int:
    best = 0
    for op, av in parsed:
        name = str(op)
        if name == "BRANCH":
            best = max([best, len(av[1])] + [_widest_alternation(b) for b in av[1]])
        elif name == "SUBPATTERN":
            best = max(best, _widest_alternation(av[-1]))
        elif name in ("MAX_REPEAT", "MIN_REPEAT"):
            best = max(best, _widest_alternation(av[2]))
    return best


def slow_hint(pattern: str) -> str:
    """Why this regex is probably slow to determinize, named from its shape (a long one by
    its length: parsing 1 MB of regex again would take seconds)."""
    if len(pattern) > 50_000:
        return f"a {len(pattern):,}-character regex, a large schema's, has too many states"
    try:
        parsed = sre_parse.parse(pattern)
    except Exception:  # noqa: BLE001 - a hint must never fail
        return "the regex is probably exponential"
    wide = _widest_alternation(parsed)
    if wide >= 200:
        return (
            f"an alternation of {wide:,} alternatives, e.g. a large enum, is slow to determinize: "
            "shorten it, or use the xgrammar or llguidance backend"
        )
    return "the regex is probably exponential, e.g. a counted repeat after an unbounded one"


def validate_regex(
    pattern: str, max_states: int = DEFAULT_MAX_STATES, max_chars: int = MAX_REGEX_CHARS
) -> str:
    """Check the regex with Python's parser and name unsupported constructs.
    Returns the normalized pattern that the automata are built from."""
    if len(pattern) > max_chars:
        raise CfsmError(
            "input_too_large", f"regex is {len(pattern)} characters; the limit is {max_chars}"
        )
    try:
        re.compile(pattern)
    except re.error as exc:
        raise CfsmError("invalid_regex", f"invalid regex: {exc}") from exc
    norm = normalize_regex(pattern)  # names every construct an automaton cannot hold
    try:
        parsed = sre_parse.parse(norm)
    except re.error as exc:
        raise CfsmError("invalid_regex", f"invalid regex: {exc}") from exc
    rep = _largest_repeat(parsed)
    if rep > max_states:
        raise CfsmError(
            "state_explosion",
            f"a counted repeat needs at least {rep} DFA states; the limit is {max_states}",
        )
    return norm


def build_char_dfa(
    pattern: str, max_states: int = DEFAULT_MAX_STATES, max_chars: int = MAX_REGEX_CHARS
) -> CharDFA:
    """Compile a regex to a canonical character DFA (may be slow for pathological input:
    callers that must stay responsive go through engine.serving.compile_cache)."""

    norm = validate_regex(pattern, max_states, max_chars)
    try:
        d = build_neutral(norm, max_states)
    except TooManyStates:
        raise CfsmError(
            "state_explosion", f"regex needs more than {max_states} DFA states"
        ) from None
    except Unsupported:
        d = _interegular_neutral(norm, max_states)
    return _canonical(pattern, d, max_states)


def _interegular_neutral(norm: str, max_states: int):
    """The same automaton through interegular: the fallback for constructs outside
    regex_automaton's core, and the oracle its tests compare against."""
    try:
        fsm = interegular.parse_pattern(norm).to_fsm()
    except interegular.Unsupported as exc:
        raise CfsmError("unsupported_feature", f"unsupported regex construct: {exc}") from exc
    except Exception as exc:  # noqa: BLE001 - interegular raises bare Exceptions
        raise CfsmError("invalid_regex", f"cannot compile regex: {exc}") from exc
    if len(fsm.states) > 4 * max_states:
        raise CfsmError("state_explosion", f"regex needs more than {max_states} DFA states")
    fsm = fsm.reduce()
    by_class: dict[int, list] = {}
    for sym, k in fsm.alphabet.items():  # Alphabet is a Mapping: symbol -> class
        by_class.setdefault(k, []).append(sym)
    anything_else = interegular_fsm.anything_else
    chars, other = {}, None
    for k, syms in by_class.items():
        if any(s is anything_else for s in syms):
            other = k
        chars[k] = "".join(sorted(s for s in syms if s is not anything_else))
    return Neutral(
        fsm.initial, set(fsm.finals), {s: dict(row) for s, row in fsm.map.items()}, chars, other
    )


def _canonical(pattern: str, d, max_states: int) -> CharDFA:
    """Renumber: classes sorted by their characters ("other" last), states breadth first
    over live states, so the same language gives the same ids in every process."""
    keyed = sorted(
        (("\U0010ffff" * 2 if k == d.other else chars), k, chars)
        for k, chars in d.class_chars.items()
        if chars or k == d.other
    )
    old_to_new = {k: i for i, (_key, k, _chars) in enumerate(keyed)}
    classes = [chars for _key, _k, chars in keyed]
    other_class = old_to_new.get(d.other) if d.other is not None else None

    # live states: can reach a final state
    rev: dict = {}
    for s, row in d.trans.items():
        for _k, t in row.items():
            rev.setdefault(t, set()).add(s)
    live = set(d.finals)
    stack = list(d.finals)
    while stack:
        t = stack.pop()
        for s in rev.get(t, ()):
            if s not in live:
                live.add(s)
                stack.append(s)
    if d.initial not in live:
        raise CfsmError("unsatisfiable", "the regex matches no string at all (empty language)")

    # BFS renumbering over live states with edges in canonical class order
    order = {d.initial: 0}
    queue = [d.initial]
    new_trans: list[dict[int, int]] = []
    qi = 0
    while qi < len(queue):
        s = queue[qi]
        qi += 1
        row = {}
        for k_old, t in sorted(
            d.trans.get(s, {}).items(), key=lambda kv: old_to_new.get(kv[0], -1)
        ):
            if t not in live or k_old not in old_to_new:
                continue
            if t not in order:
                order[t] = len(queue)
                queue.append(t)
                if len(queue) > max_states:
                    raise CfsmError(
                        "state_explosion", f"regex needs more than {max_states} DFA states"
                    )
            row[old_to_new[k_old]] = order[t]
        new_trans.append(row)
    char_class = {ch: k for k, chars in enumerate(classes) for ch in chars}
    return CharDFA(
        pattern=pattern,
        initial=0,
        finals=frozenset(order[f] for f in d.finals if f in order),
        classes=classes,
        other_class=other_class,
        trans=new_trans,
        char_class=char_class,
    )
