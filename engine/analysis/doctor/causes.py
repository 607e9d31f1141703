"""Why tokens are the model's to choose: each sample tokenized as the model writes it,
every chosen token classified by the automaton state before it (the causes and their
advice)."""

from __future__ import annotations

from collections import Counter, defaultdict

from ...regex.compressed import CompressedFSM, compressed_of
from ...regex.dfa import CharDFA
from ...schema.places import in_escape
from ...schema.pointer import resolve
from ..ideal import char_at_byte
from .places import _choice_pointer, _json_context, _json_pointer_at, _regex_span
from .samples import WS

CAUSES = {
    "flexible_whitespace": (
        "Flexible whitespace",
        "Optional whitespace between JSON tokens makes every separator a choice and breaks each "
        "chain.",
        "Use compact separators (`,` and `:` with no spaces) or spaced ones (a space after `,` "
        "and `:`) "
        "instead of flexible whitespace.",
    ),
    "enum_alternatives": (
        "Alternatives / enums without a shared prefix",
        "The model must pick among literal alternatives; only their common prefix can be jumped.",
        "Use `const` when the value is known; otherwise fewer alternatives, or values that share "
        "a prefix.",
    ),
    "optional_or_order": (
        "Optional properties or free property order",
        "Whether a property comes next (`,` or `}`) or which key comes next is a choice.",
        "List every property in `required` and set `additionalProperties: false`, so presence and "
        "order are fixed.",
    ),
    "free_text": (
        "Free-text strings",
        "String contents are the model's to write; nothing there can be jumped.",
        "Constrain strings with `enum`, `const`, `pattern` or a small `maxLength` where the "
        "content is known.",
    ),
    "numbers": (
        "Numbers",
        "Digits, sign, fraction and exponent are choices.",
        "Use `enum`/`const`, or integers with tight `minimum`/`maximum`, where the value is known.",
    ),
    "array_lengths": (
        "Array lengths",
        "After each item the model chooses between `,` and `]`.",
        "Fix the length with `minItems` = `maxItems` (or use a tuple with `prefixItems`).",
    ),
    "short_chains": (
        "Chains too short to jump",
        "Forced text of a single character is not worth a re-tokenization, so it costs a forced "
        "decoding step.",
        "Merge fixed text into longer literals; one-character chains cost a pass each.",
    ),
    "stop_decision": (
        "End of match",
        "The match may end here or go on, so stopping is a choice.",
        "Make optional tails required, or bound repetitions.",
    ),
    "other_choice": (
        "Other choices",
        "A character class or alternation in the regex.",
        "Replace character classes with literals where the text is known.",
    ),
}
BOUNDARY = (
    "Token boundaries",
    "Jump strings that start or end inside a token: the model's token and forced text share a "
    "token, "
    "and re-tokenization must re-decide the boundary (back-off).",
    "Nothing to change: boundary back-off heals these without extra passes.",
)


def suggestion(cause: str, places: list[str], schema: dict | None) -> str:
    """A cause's advice at its places: free text's `maxLength` is not offered where a
    `format` rules it out (the what-if would find it unenforceable), the alternatives are."""
    fix = CAUSES[cause][2]
    if cause != "free_text" or schema is None:
        return fix
    nodes = {p: resolve(schema, p)[1] for p in places if p.startswith("/")}
    fmt = [p for p, n in nodes.items() if isinstance(n, dict) and "format" in n]
    if not fmt:
        return fix
    return (
        f"{fix} Not maxLength at {', '.join(fmt)}: a format rules it out; give an `enum`, or "
        "a `pattern` whose repeats have a maximum in place of the format."
    )


def _classify(
    dfa: CharDFA, cf: CompressedFSM, s: int, text: str, pos: int, is_schema: bool, threshold: int
) -> str:
    row = dfa.trans[s]
    if cf.is_jumpable(s):
        return "short_chains"  # only reached for chains no longer than the jump threshold
    chars: set[str] = set()
    other = False
    for k in row:
        if k == dfa.other_class:
            other = True
        else:
            chars |= set(dfa.classes[k])
    non_ws = chars - WS
    if chars & WS and len(non_ws) <= 1 and not other and len(row) >= 2:
        return "flexible_whitespace"
    if s in dfa.finals and row:
        return "stop_decision"
    if is_schema:
        ctx = _json_context(text, pos)
        if ctx == "string":
            # inside a value string: its content is the choice, whatever else is allowed; an
            # escape's few characters (after a backslash, the hex digits of \u) are part of
            # a free string, not alternatives the schema lists
            if other or len(chars) > 12 or in_escape(text[:pos]):
                return "free_text"
            return "enum_alternatives"
        if ctx == "key":
            return "optional_or_order"
        if "]" in non_ws:
            return "array_lengths"  # closing the array now or writing another item
        if non_ws <= {",", "}"} and "}" in non_ws:
            return "optional_or_order"
        if ctx == "key" or (ctx == "structure" and '"' in non_ws and len(non_ws) > 1):
            return "optional_or_order"
        if ctx == "number" or (non_ws and non_ws <= set("-0123456789.eE+")):
            return "numbers"
        if ctx == "string":
            if other or len(chars) > 12:
                return "free_text"
            return "enum_alternatives"
        if ctx == "structure" and not other and len(chars) <= 12:
            return "enum_alternatives"
    else:
        if non_ws and non_ws <= set("-0123456789.+"):
            return "numbers"
        if other or len(chars) > 12:
            return "free_text"
        if not other and len(chars) <= 12:
            return "enum_alternatives"
    return "other_choice"


def analyse_samples(
    dfa: CharDFA,
    texts: list[str],
    tokenizer,
    token_bytes,
    is_schema: bool,
    threshold: int = 1,
    pattern: str | None = None,
    schema: dict | None = None,
) -> dict:
    """Where the samples' passes go: each costly character's cause and its place (a
    pointer walked in `schema` when given, a span of `pattern` for a regex)."""
    cf = compressed_of(dfa)
    counts: Counter = Counter()
    places: dict[str, Counter] = defaultdict(Counter)
    total_tokens = 0
    model_tokens = 0
    boundary_tokens = 0
    per_sample = []
    for text in texts:
        ids = tokenizer.encode(text, add_special_tokens=False)
        states = [dfa.initial]
        for ch in text:
            states.append(dfa.step(states[-1], ch))
        if states[-1] is None:
            continue
        byte_char = char_at_byte(text)
        # a char costs a pass when it is a choice, or forced but in a run of forced
        # characters too short to be jumped
        forced = [cf.is_jumpable(states[i]) for i in range(len(text))]
        costly_char = [not f for f in forced]
        i = 0
        while i < len(text):
            if forced[i]:
                j = i
                while j < len(text) and forced[j]:
                    j += 1
                if j - i <= threshold:
                    for k in range(i, j):
                        costly_char[k] = True
                i = j
            else:
                i += 1
        pos = 0
        sample_model = 0
        for tid in ids:
            b = token_bytes[tid] or b""
            chars = sorted({byte_char[j] for j in range(pos, min(pos + len(b), len(byte_char)))})
            pos += len(b)
            costly = [c for c in chars if costly_char[c]]
            if not costly:
                continue
            sample_model += 1
            c = costly[0]
            cause = _classify(dfa, cf, states[c], text, c, is_schema, threshold)
            counts[cause] += 1
            if len(costly) < len(chars):
                boundary_tokens += 1
            place = None
            if is_schema:
                place = (
                    _choice_pointer(text, c, schema)
                    if cause == "optional_or_order"
                    else _json_pointer_at(text, c, schema)
                )
            if not is_schema and pattern:
                forced_before = text[max(0, c - 16) : c]
                span = _regex_span(pattern, forced_before)
                place = f"regex[{span[0]}:{span[1]}]" if span else f"state {states[c]}"
            places[cause][place or "/"] += 1
        end = states[-1]
        stop = 1 if dfa.trans[end] else 0
        if stop:
            counts["stop_decision"] += 1
            places["stop_decision"]["end"] += 1
        sample_model += stop
        total_tokens += len(ids)
        model_tokens += sample_model
        per_sample.append(
            {
                "chars": len(text),
                "tokens": len(ids),
                "model_tokens": sample_model,
                "ideal_reduction": round(len(ids) / max(1, sample_model), 3),
            }
        )
    return {
        "samples": len(per_sample),
        "total_tokens": total_tokens,
        "model_tokens": model_tokens,
        "ideal_reduction": round(total_tokens / max(1, model_tokens), 3),
        "causes": counts,
        "places": places,
        "boundary_tokens": boundary_tokens,
        "per_sample": per_sample,
    }
