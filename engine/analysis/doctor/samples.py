"""Sample outputs for the doctor when the model wrote none: random walks through the
automaton that end in an accepting state."""

from __future__ import annotations

import random
from collections import defaultdict
from dataclasses import dataclass

from ...regex.dfa import CharDFA

WS = set(" \t\n\r")


@dataclass
class _Sample:
    text: str
    source: str


def _dist_to_final(dfa: CharDFA) -> list[int]:
    rev = defaultdict(set)
    for s, row in enumerate(dfa.trans):
        for t in row.values():
            rev[t].add(s)
    dist = [10**9] * dfa.num_states
    frontier = list(dfa.finals)
    for f in frontier:
        dist[f] = 0
    while frontier:
        nxt = []
        for t in frontier:
            for s in rev[t]:
                if dist[s] > dist[t] + 1:
                    dist[s] = dist[t] + 1
                    nxt.append(s)
        frontier = nxt
    return dist


def _pick_char(chars: str, rng: random.Random) -> str:
    letters = [c for c in chars if c.isalnum()]
    return rng.choice(letters or list(chars))


def synthesize(
    dfa: CharDFA,
    n: int,
    seed: int = 0,
    soft_len: int = 60,
    hard_len: int = 400,
    stop_prob: float = 0.15,
) -> list[str]:
    """Plausible strings of the language: random walks that stop at an accepting state
    with `stop_prob`, and head for one once they are `soft_len` long (letters preferred in
    free classes). A walk may run `hard_len` past the longest shortest way to an accepting
    state (a real schema's shortest document can be thousands of characters)."""
    rng = random.Random(seed)
    dist = _dist_to_final(dfa)
    longest = max((d for d in dist if d < 10**9), default=0)
    out = []
    for _ in range(n):
        s, text = dfa.initial, []
        while len(text) < soft_len + longest + hard_len:
            row = dfa.trans[s]
            if not row or (s in dfa.finals and (len(text) > soft_len or rng.random() < stop_prob)):
                break
            edges = sorted(row.items())
            if len(text) > soft_len:
                edges = [min(edges, key=lambda kt: dist[kt[1]])]
            k, t = rng.choice(edges)
            ch = "x" if k == dfa.other_class else _pick_char(dfa.classes[k], rng)
            if dfa.step(s, ch) is None:
                break
            text.append(ch)
            s = t
        if dfa.walk("".join(text)) in dfa.finals:
            out.append("".join(text))
    return out
