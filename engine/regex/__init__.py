"""Regex to character automaton: normalization to the common dialect, character sets,
Glushkov + Hopcroft DFAs, regex algebra, and the compressed FSM (chains, jump
strings)."""
