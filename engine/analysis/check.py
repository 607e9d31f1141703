"""Does a constraint accept a text, for a given backend? The text is tokenized as the model
would write it (canonical tokenization) and walked through the backend's own matcher, so
the verdict is that backend's; where the constraint has a character automaton, the place
it leaves the language is pinned to the character and described by what was allowed."""

from __future__ import annotations

from ..backends import CompiledConstraint, TokenizerContext
from ..constraint import Constraint
from ..regex.dfa import CharDFA
from .json_scan import scan_json
from .unbounded import limit_reached

MAX_EXPECTED = 8


def _expected_chars(dfa: CharDFA, state: int) -> list[str]:
    """Every character the state allows, none left out: up to MAX_EXPECTED of them each
    quoted like a token (`' '`, `'\\n'`, `','`: bare, a space or a newline printed as
    nothing), more as one class in ranges (`[%+\\-.0-9A-Za-z_]`, not the automaton's
    own split into the classes it tells apart, cut at 8: `c, d, e, g, m` for an email's
    first letter); a character outside every listed one as the automaton's label."""
    row = dfa.trans[state]
    chars = sorted({c for k in row if k != dfa.other_class for c in dfa.classes[k]})
    if len(chars) <= MAX_EXPECTED:
        out = [repr(c) for c in chars]
    else:
        out = [dfa.class_label_of("".join(chars))]
    if dfa.other_class is not None and dfa.other_class in row:
        out.append(dfa.class_label(dfa.other_class))
    return out + (["<end>"] if state in dfa.finals else [])


def _expected_tokens(m, ctx: TokenizerContext) -> list[str]:
    ids = m.allowed_ids()
    eos = ctx.eos_token_id
    out = [
        repr((ctx.vocab.token_bytes[int(t)] or b"").decode("utf-8", "replace"))
        for t in ids
        if int(t) != eos
    ]
    more = [f"\u2026 {len(out) - MAX_EXPECTED} more"] if len(out) > MAX_EXPECTED else []
    return out[:MAX_EXPECTED] + more + (["<end>"] if eos in set(int(t) for t in ids) else [])


def _char_reject(dfa: CharDFA, text: str, start_char: int) -> tuple[int | None, int | None]:
    """Walk `text` from the beginning; the character index where the automaton leaves the
    language at or after `start_char` (None: it does not) and the state before it."""
    s = dfa.initial
    for i, ch in enumerate(text):
        nxt = dfa.step(s, ch)
        if nxt is None:
            return (i, s) if i >= start_char else (start_char, None)
        s = nxt
    return None, s


def check_text(
    compiled: CompiledConstraint,
    dfa: CharDFA | None,
    ctx: TokenizerContext,
    text: str,
    constraint: Constraint | None = None,
) -> dict:
    """{accepted, prefix_ok, rejected_at (byte offset or None), expected, warnings} for one
    text under one compiled constraint (warnings start with what the compile let through);
    with the schema `constraint`, a rejection also names the bound it hit ('limit')."""
    out = _check(compiled, dfa, ctx, text)
    at = out["rejected_at"]
    if at is not None and constraint is not None:
        data = text.encode("utf-8")
        prefix = data[:at].decode("utf-8", "ignore")
        nxt = data[at:].decode("utf-8", "ignore")[:1]
        limit = limit_reached(constraint, prefix, nxt) or _whitespace_hint(constraint, prefix, nxt)
        if limit:
            out["limit"] = limit
    return out


_WS_POLICY = {
    "compact": "the compact whitespace policy writes no whitespace between JSON tokens",
    "spaced": "the spaced whitespace policy writes one space after ',' and ':', no other",
    "flexible": "the flexible whitespace policy allows at most one space around separators",
}


def _whitespace_hint(constraint: Constraint, prefix: str, nxt: str) -> str:
    """Why whitespace outside a string was refused: the policy that forbids it, so that
    pretty-printed JSON is not only "expected '\"'"."""
    if constraint.kind != "schema" or not nxt.isspace():
        return ""
    if scan_json(prefix, len(prefix)).in_str:
        return ""
    hint = _WS_POLICY[constraint.whitespace]
    if nxt != " ":
        return hint + " (no policy allows newlines or tabs: pretty-printed JSON is refused)"
    return hint if constraint.whitespace == "flexible" else hint + " (flexible allows a space)"


def _check(
    compiled: CompiledConstraint, dfa: CharDFA | None, ctx: TokenizerContext, text: str
) -> dict:
    ids = ctx.continuation.encode(text)
    tb = ctx.vocab.token_bytes
    m = compiled.matcher()
    pos = 0
    warnings: list[str] = list(compiled.warnings)
    for i, t in enumerate(ids):
        if not m.accept_token(int(t)):
            # some backends are left in an error state by a refused token: replay the prefix
            m = compiled.matcher()
            for u in ids[:i]:
                m.accept_token(int(u))
            return _rejected(m, ctx, dfa, text, pos, t, warnings)
        pos += len(tb[int(t)] or b"")
    accepted = m.is_final()
    expected = [] if accepted else _expected_tokens(m, ctx)
    if dfa is not None and not accepted:
        end = dfa.walk(text)
        expected = _expected_chars(dfa, end) if end is not None else expected
    return {
        "accepted": accepted,
        "prefix_ok": True,
        "rejected_at": None,
        "expected": expected,
        "warnings": warnings,
    }


def _rejected(
    m,
    ctx: TokenizerContext,
    dfa: CharDFA | None,
    text: str,
    pos: int,
    tid: int,
    warnings: list[str],
) -> dict:
    """The backend refused token `tid` starting at byte `pos`: pin the character where the
    automaton (when there is one) leaves the language, else report the token boundary."""
    data = text.encode("utf-8")
    start_char = len(data[:pos].decode("utf-8", "ignore"))
    at, expected = pos, _expected_tokens(m, ctx)
    if dfa is not None:
        i, state = _char_reject(dfa, text, start_char)
        if i is not None and state is not None:
            at, expected = len(text[:i].encode("utf-8")), _expected_chars(dfa, state)
        else:
            tok = (ctx.vocab.token_bytes[int(tid)] or b"").decode("utf-8", "replace")
            warnings.append(
                f"the backend refuses the token {tok!r} at byte {pos} although the automaton "
                "allows its characters"
            )
    return {
        "accepted": False,
        "prefix_ok": False,
        "rejected_at": at,
        "expected": expected,
        "warnings": warnings,
    }
