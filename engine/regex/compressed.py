"""The compressed FSM: chains of forced single characters and jump-forward strings.

A state is *jumpable* when the model has no choice there: it is not accepting (ending is
an implicit second edge), it has exactly one live outgoing edge, and that edge carries
exactly one character (a multi-character class or "anything else" is a choice).
"""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import CfsmError
from .dfa import CharDFA


@dataclass(frozen=True)
class Chain:
    """A maximal run of forced characters, collapsible into one graph edge."""

    start: int
    end: int
    string: str
    states: tuple[int, ...]  # start .. end inclusive

    def to_json(self) -> dict:
        return {
            "from": self.start,
            "to": self.end,
            "string": self.string,
            "states": list(self.states),
        }


class CompressedFSM:
    """Forced-character analysis of a CharDFA, computed once per automaton."""

    def __init__(self, dfa: CharDFA) -> None:
        self.dfa = dfa
        n = dfa.num_states
        self.forced: list[tuple[str, int] | None] = [None] * n
        self.indegree = [0] * n
        for s, row in enumerate(dfa.trans):
            for t in row.values():
                self.indegree[t] += 1
            if s in dfa.finals or len(row) != 1:
                continue
            ((k, t),) = row.items()
            if k == dfa.other_class:
                continue
            chars = dfa.classes[k]
            if len(chars) == 1:
                self.forced[s] = (chars, t)
        self._jump_cache: dict[int, str] = {}
        self.chains = self._build_chains()

    def is_jumpable(self, state: int) -> bool:
        return self.forced[state] is not None

    @property
    def jumpable_states(self) -> list[int]:
        return [s for s, f in enumerate(self.forced) if f is not None]

    def jump_string(self, state: int) -> str:
        """All characters forced from `state` on (stops at a choice or accepting state)."""
        cached = self._jump_cache.get(state)
        if cached is not None:
            return cached
        out: list[str] = []
        seen = set()
        s = state
        while self.forced[s] is not None and s not in seen:
            seen.add(s)
            ch, s = self.forced[s]  # type: ignore[misc]
            out.append(ch)
        text = "".join(out)
        self._jump_cache[state] = text
        return text

    def jump_end(self, state: int) -> int:
        """State reached after following the jump string from `state`."""
        s = self.dfa.walk(self.jump_string(state), state)
        assert s is not None
        return s

    def continuation(self, prefix: str) -> str:
        """Jump-forward continuation after `prefix`; errors when the prefix cannot be
        extended to a match."""
        s = self.dfa.walk(prefix)
        if s is None:
            raise CfsmError(
                "prefix_outside_language",
                f"prefix {prefix!r} cannot be extended to a match of the regex",
            )
        return self.jump_string(s)

    def _build_chains(self) -> list[Chain]:
        """Maximal forced paths whose inner states have a single way in, so each chain
        can be drawn as one edge."""
        chains = []
        forced_targets = {f[1] for f in self.forced if f is not None}
        for s in range(self.dfa.num_states):
            if self.forced[s] is None:
                continue
            # a chain starts where no forced edge leads into s as its only way in
            if self.indegree[s] == 1 and s != self.dfa.initial and s in forced_targets:
                continue
            states = [s]
            chars = []
            cur = s
            while True:
                ch, nxt = self.forced[cur]  # type: ignore[misc]
                chars.append(ch)
                states.append(nxt)
                if self.forced[nxt] is None or self.indegree[nxt] != 1 or nxt in states[:-1]:
                    break
                cur = nxt
            chains.append(Chain(s, states[-1], "".join(chars), tuple(states)))
        return chains

    def stats(self) -> dict:
        n = self.dfa.num_states
        jumpable = self.jumpable_states
        return {
            "num_states": n,
            "jumpable_states": len(jumpable),
            "jumpable_share": round(len(jumpable) / n, 4) if n else 0.0,
            "num_chains": len(self.chains),
            "longest_chain": max((len(c.string) for c in self.chains), default=0),
            "chain_chars": sum(len(c.string) for c in self.chains),
        }


def compressed_of(dfa: CharDFA) -> CompressedFSM:
    """The CompressedFSM of a DFA, built once and kept on the DFA object."""
    cf = dfa.__dict__.get("_compressed")
    if cf is None:
        cf = CompressedFSM(dfa)
        dfa.__dict__["_compressed"] = cf
    return cf
