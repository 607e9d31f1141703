"""Boolean combinations of regexes, written back as a regex: the product of their DFAs,
minimized, then turned into a regex by state elimination. `patternProperties` needs it:
"a key that matches `^x-` but not `_id$`, and is none of the listed names" is regular,
but not something a regex can say with `|`, concatenation and `*` alone until computed.

Small inputs only (object keys): a product past `max_states`, or a regex past
`max_chars`, raises TooLarge, and the caller keeps its smaller, still exact, language."""

from __future__ import annotations

import re
from collections.abc import Callable

from ..errors import CfsmError
from .dfa import CharDFA, build_char_dfa
from .sets import norm, of_chars

MAX_STATES = 400
MAX_CHARS = 60_000


class TooLarge(Exception):
    """The product automaton or its regex passed the stated limit."""


def combine(
    regexes: list[str],
    want: Callable[[tuple[bool, ...]], bool],
    max_states: int = MAX_STATES,
    max_chars: int = MAX_CHARS,
) -> str | None:
    """A regex for the strings s with want(tuple(s in L(r) for r in regexes)), or None
    when that language is empty. Raises TooLarge past the limits."""
    try:
        dfas = [
            build_char_dfa(r, max_states=max_states * 4, max_chars=10 * max_chars) for r in regexes
        ]
    except CfsmError as exc:  # state_explosion, input_too_large
        raise TooLarge(exc.message) from None
    classes, listed = _refine(dfas)
    trans, finals = _minimize(*_product(dfas, classes, want, max_states))
    if not finals:
        return None
    return _eliminate(trans, finals, lambda ks: _label(ks, classes, listed), max_chars)


def _refine(dfas: list[CharDFA]) -> tuple[list[str], str]:
    """Classes every DFA agrees on: characters grouped by their class in each DFA. The
    last class is "every character no DFA lists"; its text is the listed characters."""
    listed = sorted({ch for d in dfas for ch in d.char_class})
    groups: dict[tuple, list[str]] = {}
    for ch in listed:
        groups.setdefault(tuple(d.class_of(ch) for d in dfas), []).append(ch)
    classes = ["".join(v) for v in groups.values()]
    return classes, "".join(listed)


def _product(dfas: list[CharDFA], classes: list[str], want, max_states: int):
    """Reachable product states (a component None: that DFA rejected already)."""
    reps = [c[0] for c in classes]  # one character stands for its class
    others = [d.other_class for d in dfas]
    start = tuple(d.initial for d in dfas)
    index, trans, finals, todo = {start: 0}, [], set(), [start]
    while todo:
        state = todo.pop()
        sid = index[state]
        while len(trans) <= sid:
            trans.append({})
        if want(tuple(s is not None and s in d.finals for s, d in zip(state, dfas, strict=True))):
            finals.add(sid)
        for k in range(len(classes) + 1):
            nxt = tuple(
                None
                if s is None
                else (
                    d.step(s, reps[k])
                    if k < len(classes)
                    else (d.trans[s].get(o) if o is not None else None)
                )
                for s, d, o in zip(state, dfas, others, strict=True)
            )
            if nxt not in index:
                if len(index) >= max_states:
                    raise TooLarge(f"more than {max_states} states")
                index[nxt] = len(index)
                todo.append(nxt)
            trans[sid][k] = index[nxt]
    while len(trans) < len(index):
        trans.append({})
    return trans, finals


def _minimize(
    trans: list[dict[int, int]], finals: set[int]
) -> tuple[list[dict[int, int]], set[int]]:
    """Moore partition refinement, then dead states (that reach no final) dropped."""
    part = _dense([s in finals for s in range(len(trans))])
    while True:
        new = _dense(
            [
                (part[s], tuple(sorted((k, part[t]) for k, t in trans[s].items())))
                for s in range(len(trans))
            ]
        )
        if len(set(new)) == len(set(part)):
            break
        part = new
    n = len(set(part))
    mtrans: list[dict[int, int]] = [{} for _ in range(n)]
    for s, row in enumerate(trans):
        for k, t in row.items():
            mtrans[part[s]][k] = part[t]
    mfinals = {part[s] for s in finals}
    live, grew = set(mfinals), True
    while grew:
        grew = False
        for s, row in enumerate(mtrans):
            if s not in live and any(t in live for t in row.values()):
                live.add(s)
                grew = True
    start = part[0]
    order = [start] + [s for s in range(n) if s != start and s in live]
    if start not in live:
        return [{}], set()
    ren = {s: i for i, s in enumerate(order)}
    out = [{k: ren[t] for k, t in mtrans[s].items() if t in live} for s in order]
    return out, {ren[s] for s in mfinals}


def _dense(labels: list) -> list[int]:
    """Labels renumbered 0, 1, 2, ... in order of first appearance."""
    ids: dict = {}
    return [ids.setdefault(x, len(ids)) for x in labels]


def _eliminate(
    trans: list[dict[int, int]], finals: set[int], label: Callable[[list[int]], str], max_chars: int
) -> str:
    """State elimination: edges carry regexes; each state removed adds in·loop*·out."""
    n = len(trans)
    start, end = n, n + 1
    edge: dict[tuple[int, int], str] = {(start, 0): ""}
    for s, row in enumerate(trans):
        by_target: dict[int, list[int]] = {}
        for k, t in row.items():
            by_target.setdefault(t, []).append(k)
        for t, ks in by_target.items():
            edge[(s, t)] = label(ks)
    for f in finals:
        edge[(f, end)] = _alt([edge[(f, end)], ""]) if (f, end) in edge else ""
    remaining = set(range(n))
    while remaining:
        s = min(remaining, key=lambda q: sum(1 for a, b in edge if a == q or b == q))
        remaining.discard(s)
        loop = edge.pop((s, s), None)
        star = "" if loop is None else _group(loop) + "*"
        ins = [(a, r) for (a, b), r in edge.items() if b == s]
        outs = [(b, r) for (a, b), r in edge.items() if a == s]
        for a, _ in ins:
            del edge[(a, s)]
        for b, _ in outs:
            del edge[(s, b)]
        for a, r1 in ins:
            for b, r2 in outs:
                piece = _cat(r1, star, r2)
                edge[(a, b)] = _alt([edge[(a, b)], piece]) if (a, b) in edge else piece
                if len(edge[(a, b)]) > max_chars:
                    raise TooLarge(f"a regex past {max_chars} characters")
    return edge[(start, end)]


def _group(r: str) -> str:
    """`r` as one atom (for a following `*`)."""
    return r if _atom(r) else f"({r})"


def _cat(*parts: str) -> str:
    return "".join(f"({p})" if _top_level_alt(p) else p for p in parts)


def _scan(r: str):
    """(index, character, depth) outside character classes and escapes."""
    depth, i, in_class = 0, 0, False
    while i < len(r):
        ch = r[i]
        if ch == "\\":
            i += 2
            continue
        if in_class:
            in_class = ch != "]"
        elif ch == "[":
            in_class = True
            if r[i + 1 : i + 2] == "^":
                i += 1
            if r[i + 1 : i + 2] == "]":
                i += 1
        elif ch in "()":
            depth += 1 if ch == "(" else -1
            yield i, ch, depth
        elif ch == "|":
            yield i, ch, depth
        i += 1


def _top_level_alt(r: str) -> bool:
    return any(ch == "|" and depth == 0 for _, ch, depth in _scan(r))


def _atom(r: str) -> bool:
    """One character, one class, or one group spanning the whole text."""
    if len(r) == 1 or (len(r) == 2 and r[0] == "\\") or r.startswith("\\x") and len(r) == 4:
        return True
    marks = list(_scan(r))
    if r.startswith("[") and r.endswith("]"):
        return not marks and _class_end(r) == len(r) - 1
    if r.startswith("(") and r.endswith(")"):
        return not any(depth == 0 for i, ch, depth in marks if i < len(r) - 1 and ch == ")")
    return False


def _class_end(r: str) -> int:
    i = 1 + (r[1:2] == "^")
    i += r[i : i + 1] == "]"
    while i < len(r) and r[i] != "]":
        i += 2 if r[i] == "\\" else 1
    return i


def _alt(parts: list[str]) -> str:
    uniq = list(dict.fromkeys(parts))
    if len(uniq) == 1:
        return uniq[0]
    if "" in uniq:
        rest = [p for p in uniq if p]
        return f"({'|'.join(rest)})?"
    return "|".join(uniq)


def _label(ks: list[int], classes: list[str], listed: str) -> str:
    """The classes one edge takes, as one character class (k == len(classes): the
    characters no DFA lists)."""
    chars = "".join(classes[k] for k in ks if k < len(classes))
    if len(classes) in ks:  # every character except the listed ones this edge does not take
        rest = "".join(sorted(set(listed) - set(chars)))
        return f"[^{_body(rest)}]" if rest else r"[\s\S]"
    if len(chars) == 1:
        return _char(ord(chars), in_class=False)
    return f"[{_body(chars)}]"


def _body(chars: str) -> str:
    return "".join(
        _char(a) if a == b else f"{_char(a)}-{_char(b)}" for a, b in norm(of_chars(chars))
    )


def _char(cp: int, in_class: bool = True) -> str:
    """One character in a regex: controls as \\xHH, the rest as is (escaped where special)."""
    if cp < 0x20 or cp == 0x7F:
        return f"\\x{cp:02x}"
    ch = chr(cp)
    if in_class:
        return "\\" + ch if ch in "]\\^-[" else ch
    return re.escape(ch)
