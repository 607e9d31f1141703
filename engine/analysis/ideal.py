"""The ideal forward-pass count for an output: tokens the model itself must choose when
every forced character is jumped over for free."""

from __future__ import annotations

from ..regex.compressed import CompressedFSM


def free_char_flags(
    cfsm: CompressedFSM, text: str, past_end: bool | None = None
) -> list[bool] | None:
    """For each character: True when the model had a choice there (not forced). Where
    `text` leaves the automaton: None, or with `past_end` given, the characters from
    there on flagged `past_end`."""
    s = cfsm.dfa.initial
    flags = []
    for ch in text:
        flags.append(not cfsm.is_jumpable(s))
        nxt = cfsm.dfa.step(s, ch)
        if nxt is None:
            if past_end is None:
                return None
            return flags + [past_end] * (len(text) - len(flags))
        s = nxt
    return flags


def choice_tokens(
    flags: list[bool], text: str, token_ids: list[int], token_bytes: list[bytes | None]
) -> list[bool]:
    """For each token of `token_ids` (a tokenization of `text`): it holds at least one
    character flagged free (a token of no bytes holds none)."""
    byte_char = char_at_byte(text)
    pos, out = 0, []
    for tid in token_ids:
        n = len(token_bytes[tid] or b"")
        out.append(any(flags[byte_char[j]] for j in range(pos, min(pos + n, len(byte_char)))))
        pos += n
    return out


def char_at_byte(text: str) -> list[int]:
    """For each UTF-8 byte of `text`, the index of the character it belongs to."""
    out: list[int] = []
    for i, ch in enumerate(text):
        out.extend([i] * len(ch.encode("utf-8")))
    return out


def token_char_starts(text: str, byte_lengths: list[int]) -> list[int]:
    """For each token (given by its byte length) of a tokenization of `text`, the index of
    the character it starts in (`len(text)` for one past the end)."""
    byte_char, pos, out = char_at_byte(text), 0, []
    for n in byte_lengths:
        out.append(byte_char[pos] if pos < len(byte_char) else len(text))
        pos += n
    return out


def ideal_counts(
    cfsm: CompressedFSM, text: str, token_ids: list[int], token_bytes: list[bytes | None]
) -> dict | None:
    """Count tokens of `token_ids` (a tokenization of `text`) that contain at least one
    free character, plus the stop decision where the automaton could still go on."""
    flags = free_char_flags(cfsm, text)
    if flags is None:
        return None
    model_tokens = sum(choice_tokens(flags, text, token_ids, token_bytes))
    end = cfsm.dfa.walk(text)
    stop_choice = 1 if end is not None and cfsm.dfa.trans[end] else 0
    forced_chars = sum(1 for f in flags if not f)
    return {
        "output_tokens": len(token_ids),
        "model_tokens": model_tokens + stop_choice,
        # tokens with no free character: jump-forward writes them without the model
        "forced_tokens": len(token_ids) - model_tokens,
        "forced_chars": forced_chars,
        "chars": len(text),
        "ideal_reduction": round(len(token_ids) / max(1, model_tokens + stop_choice), 3),
    }
