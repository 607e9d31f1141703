"""Regex to minimal character DFA, built here from the normalized pattern's parse tree.

Why not interegular: its FSM algebra (concatenation and union by crawling product states)
took ~150 ms for the SGLang character regex and ~0.9 s for a small JSON schema, most of
every compile. Here: a position (Glushkov) automaton over character classes, subset
construction, then Moore minimization; the same language, minimal, so the canonical
renumbering in regex_dfa gives the same automaton. Constructs the normalizer leaves
outside this small core (none are expected) raise `Unsupported` and the caller falls back
to interegular.

Character classes: every character a set mentions is split into classes by which sets hold
it; characters no set mentions form the "other" class (held only by negated sets)."""

from __future__ import annotations

from dataclasses import dataclass, field

from .sets import sre_parse

MAXREPEAT = sre_parse.MAXREPEAT
_C = sre_parse  # opcode constants live on the parser module


class Unsupported(Exception):
    """A construct outside the core (the caller falls back to interegular)."""


class TooManyStates(Exception):
    pass


@dataclass
class CharSet:
    ranges: list[tuple[int, int]]
    negated: bool = False


@dataclass
class Neutral:
    """A DFA before canonical numbering: classes by key, transitions by class key."""

    initial: int
    finals: set[int]
    trans: dict[int, dict[int, int]]
    class_chars: dict[int, str]  # class key -> its characters ("" for the other class)
    other: int | None


def _charset(op, av) -> CharSet:
    if op == _C.LITERAL:
        return CharSet([(av, av)])
    if op == _C.NOT_LITERAL:
        return CharSet([(av, av)], True)
    if op == _C.ANY:
        return CharSet([(10, 10)], True)
    if op == _C.IN:
        neg, ranges = False, []
        for iop, iav in av:
            if iop == _C.NEGATE:
                neg = True
            elif iop == _C.LITERAL:
                ranges.append((iav, iav))
            elif iop == _C.RANGE:
                ranges.append(iav)
            else:
                raise Unsupported(f"class item {iop}")
        return CharSet(ranges, neg)
    raise Unsupported(str(op))


def _tree(items, sets: list[CharSet]):
    """sre items -> ('cat', [...]) | ('alt', [...]) | ('sym', set index) | ('rep', node, lo, hi)."""
    out = []
    for op, av in items:
        if op in (_C.LITERAL, _C.NOT_LITERAL, _C.ANY, _C.IN):
            sets.append(_charset(op, av))
            out.append(("sym", len(sets) - 1))
        elif op == _C.BRANCH:
            out.append(("alt", [_tree(seq, sets) for seq in av[1]]))
        elif op == _C.SUBPATTERN:
            if av[1] or av[2]:
                raise Unsupported("scoped flags")
            out.append(_tree(av[3], sets))
        elif op in (_C.MAX_REPEAT, _C.MIN_REPEAT, getattr(_C, "POSSESSIVE_REPEAT", None)):
            lo, hi, seq = av
            out.append(("rep", _tree(seq, sets), lo, None if hi == MAXREPEAT else hi))
        else:
            raise Unsupported(str(op))
    return out[0] if len(out) == 1 else ("cat", out)


def _classes(sets: list[CharSet]) -> tuple[list[tuple[str, frozenset[int]]], frozenset[int] | None]:
    """Classes of mentioned characters (chars, the sets holding them) and the sets that
    hold every unmentioned character (None when none does)."""
    events: dict[int, list[tuple[int, int]]] = {}
    for i, s in enumerate(sets):
        for lo, hi in s.ranges:
            events.setdefault(lo, []).append((i, 1))
            events.setdefault(hi + 1, []).append((i, -1))
    negated = frozenset(i for i, s in enumerate(sets) if s.negated)
    active: dict[int, int] = {}
    groups: dict[frozenset[int], list[str]] = {}
    bounds = sorted(events)
    for a, b in zip(bounds, bounds[1:] + [bounds[-1]] if bounds else [], strict=False):
        for i, d in events[a]:  # a sweep: the sets whose ranges cover [a, b)
            active[i] = active.get(i, 0) + d
            if not active[i]:
                del active[i]
        if not active or a >= b:
            continue  # a gap between mentioned ranges: unmentioned
        held = frozenset(active) ^ negated  # a negated set holds what it does not mention
        groups.setdefault(held, []).extend(chr(c) for c in range(a, b))
    return [("".join(chars), held) for held, chars in groups.items()], (negated or None)


@dataclass
class _Glushkov:
    sym: list[int] = field(default_factory=list)  # position -> set index
    follow: list[set[int]] = field(default_factory=list)

    def build(self, node) -> tuple[bool, set[int], set[int]]:
        """(nullable, first, last) of a node, adding fresh positions and follow edges."""
        kind = node[0]
        if kind == "sym":
            self.sym.append(node[1])
            self.follow.append(set())
            p = len(self.sym) - 1
            return False, {p}, {p}
        if kind == "alt":
            n, f, last = False, set(), set()
            for sub in node[1]:
                sn, sf, sl = self.build(sub)
                n, f, last = n or sn, f | sf, last | sl
            return n, f, last
        if kind == "cat":
            acc = (True, set(), set())
            for sub in node[1]:
                acc = self._cat(acc, self.build(sub))
            return acc
        return self._rep(node[1], node[2], node[3])

    def _cat(self, a, b):
        an, af, al = a
        bn, bf, bl = b
        for p in al:
            self.follow[p] |= bf
        first = af | bf if an else af
        if bn:
            bl = bl | al
        return an and bn, first, bl

    def _rep(self, sub, lo: int, hi: int | None):
        if lo and _nullable(sub):
            lo = 0  # x{m,n} = x{0,n} when x matches empty: fewer copies that may all be skipped
        acc = (True, set(), set())
        for _ in range(lo):
            acc = self._cat(acc, self.build(sub))
        if hi is None:
            sn, sf, sl = self.build(sub)
            for p in sl:
                self.follow[p] |= sf
            return self._cat(acc, (True, sf, sl))
        # x{0,k} as (x(x(...)?)?)? built inside out, so that it stays deterministic
        tail = (True, set(), set())
        for _ in range(hi - lo):
            tail = self._cat(self.build(sub), tail)
            tail = (True, tail[1], tail[2])
        return self._cat(acc, tail)


def _nullable(node) -> bool:
    kind = node[0]
    if kind == "sym":
        return False
    if kind == "alt":
        return any(_nullable(n) for n in node[1])
    if kind == "cat":
        return all(_nullable(n) for n in node[1])
    return node[2] == 0 or _nullable(node[1])


def build_neutral(norm: str, max_states: int) -> Neutral:
    sets: list[CharSet] = []
    tree = _tree(sre_parse.parse(norm), sets)
    classes, other_sets = _classes(sets)
    g = _Glushkov()
    nullable, first, last = g.build(tree)
    n_cls = len(classes)
    class_of_set: list[list[int]] = [[] for _ in sets]
    for k, (_chars, held) in enumerate(classes):
        for i in held:
            class_of_set[i].append(k)
    # characters no set mentions: a class even when nothing takes it, as interegular has
    # (except for a pattern that mentions no character at all)
    other = n_cls if sets else None
    for i in other_sets or ():
        class_of_set[i].append(n_cls)
    pos_classes = [class_of_set[s] for s in g.sym]
    start: frozenset[int] = frozenset({-1})
    ids = {start: 0}
    todo = [start]
    trans: dict[int, dict[int, int]] = {}
    finals = {0} if nullable else set()
    while todo:
        state = todo.pop()
        sid = ids[state]
        cand = first if state == start else set().union(*(g.follow[p] for p in state))
        targets: dict[int, set[int]] = {}
        for q in cand:
            for k in pos_classes[q]:
                targets.setdefault(k, set()).add(q)
        row = {}
        for k, qs in targets.items():
            nxt = frozenset(qs)
            t = ids.get(nxt)
            if t is None:
                t = ids[nxt] = len(ids)
                if t > 4 * max_states:
                    raise TooManyStates()
                if nxt & last:
                    finals.add(t)
                todo.append(nxt)
            row[k] = t
        trans[sid] = row
    chars = {k: c for k, (c, _held) in enumerate(classes)}
    if other is not None:
        chars[other] = ""
    return minimize(Neutral(0, finals, trans, chars, other))


def minimize(d: Neutral) -> Neutral:
    """Hopcroft's partition refinement, O(n k log n): long counted repeats make thousands
    of states, where Moore's rounds would be quadratic. Missing edges go to an explicit
    dead state while refining; it is dropped afterwards."""
    states = list(d.trans)
    dead = max(states) + 1
    symbols = sorted({k for row in d.trans.values() for k in row})
    into: dict[int, list[tuple[int, int]]] = {}  # target -> (symbol, source) pairs
    for s_ in states + [dead]:
        row = d.trans.get(s_, {})
        for k in symbols:
            into.setdefault(row.get(k, dead), []).append((k, s_))
    finals = set(d.finals)
    rest = set(states) - finals | {dead}
    blocks: list[set[int]] = [b for b in (finals, rest) if b]
    where = {s_: i for i, b in enumerate(blocks) for s_ in b}
    work = {min(range(len(blocks)), key=lambda i: len(blocks[i]))} if len(blocks) > 1 else set()
    while work:
        pre: dict[int, list[int]] = {}  # symbol -> states that it takes into the splitter
        for t in blocks[work.pop()]:
            for k, s_ in into.get(t, ()):
                pre.setdefault(k, []).append(s_)
        for sources in pre.values():
            touched: dict[int, set[int]] = {}
            for s_ in sources:
                touched.setdefault(where[s_], set()).add(s_)
            for i, inside in touched.items():
                if len(inside) == len(blocks[i]):
                    continue
                blocks[i] -= inside
                j = len(blocks)
                blocks.append(inside)
                for s_ in inside:
                    where[s_] = j
                if i in work:
                    work.add(j)
                else:
                    work.add(i if len(blocks[i]) < len(inside) else j)
    trans = {}
    for s_ in states:
        trans.setdefault(where[s_], {k: where[t] for k, t in d.trans[s_].items()})
    return Neutral(where[d.initial], {where[s_] for s_ in d.finals}, trans, d.class_chars, d.other)
