import json
import re
import subprocess
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.errors import CfsmError
from engine.regex.dfa import build_char_dfa, normalize_regex


@pytest.mark.parametrize(
    "pattern, good, bad",
    [
        (r"[0-9]{3}-[0-9]{4}", ["555-1234"], ["5551234", "55-1234"]),
        (r"(apple|apricot)", ["apple", "apricot"], ["ap", "apples"]),
        (r"\u4e2d\u6587[a-c]+", ["中文abc"], ["中文", "中文d"]),
        (r"🙂+!", ["🙂🙂!"], ["!"]),
        (r"[\w\d\s]{1,3}", ["a 1", "_"], ["", "abcd", "é"]),
        (r"^ab$", ["ab"], ["a"]),
        (r"[^\"]x", ["ax", "中x"], ['"x']),
    ],
)
def test_dfa_agrees_with_python_re(pattern, good, bad):
    dfa = build_char_dfa(pattern)
    for s in good:
        assert dfa.accepts(s), s
    for s in bad:
        assert not dfa.accepts(s), s
    # the normalized pattern means the same to Python's re on these strings
    norm = normalize_regex(pattern)
    for s in good:
        assert re.fullmatch(norm, s)


def test_unicode_escapes_become_literals():
    assert normalize_regex(r"\u4e2d\U0001F642") == "中🙂"
    assert normalize_regex(r"[\u005d]") == r"\]"  # a one-character class is that character
    assert normalize_regex(r"\u002e") == r"\."
    assert normalize_regex(r"a\\u0041") == r"a\\u0041"  # escaped backslash stays literal


@pytest.mark.parametrize(
    "pattern, kind, word",
    [
        ("(?=a)b", "unsupported_feature", "look-ahead"),
        ("(?!a)b", "unsupported_feature", "negative look-around"),
        (r"(a)\1", "unsupported_feature", "back-reference"),
        (r"\bfoo", "unsupported_feature", "word boundary"),
        ("a(b", "invalid_regex", "missing )"),
        ("a{3,1}", "invalid_regex", "min repeat greater than max"),
        ("a{100000}", "state_explosion", "100000"),
        (r"[^\s\S]", "unsatisfiable", "empty language"),
    ],
)
def test_bad_regexes_name_the_problem(pattern, kind, word):
    with pytest.raises(CfsmError) as ei:
        build_char_dfa(pattern)
    assert ei.value.kind == kind
    assert word in ei.value.message
    assert "\n" not in ei.value.message


def test_state_limit_is_enforced():
    with pytest.raises(CfsmError) as ei:
        build_char_dfa("(a|b)*a(a|b){8}", max_states=100)
    assert ei.value.kind == "state_explosion"


def test_numbering_is_canonical_across_hash_seeds(character_regex):
    code = (
        "import json,sys; from engine.regex.dfa import build_char_dfa; "
        "d=build_char_dfa(sys.argv[1]); print(json.dumps(d.to_json()))"
    )
    outs = []
    for seed in ("1", "2"):
        env = {"PYTHONHASHSEED": seed, "PATH": "/usr/bin:/bin"}
        r = subprocess.run(
            [sys.executable, "-c", code, character_regex],
            capture_output=True,
            text=True,
            env=env,
            check=True,
        )
        outs.append(json.loads(r.stdout))
    assert outs[0] == outs[1]
    assert outs[0]["num_states"] > 100


@pytest.mark.parametrize(
    "pattern, accept, reject",
    [
        ("(?s)a.b", ["a\nb", "axb"], ["ab"]),
        ("a.b", ["axb"], ["a\nb"]),
        ("^$|^https://x\\.com/", ["", "https://x.com/"], ["x"]),
        (r"a\\$", ["a\\"], ["a"]),
        ("(^x|y$)", ["x", "y"], ["xy"]),
        ("(?i)ab", ["AB", "aB"], ["ac"]),
        ("(?i:a)b", ["Ab", "ab"], ["AB"]),
        (r"\Aab\Z", ["ab"], ["a"]),
        (r"[\W]x", ["-x"], ["ax"]),
    ],
)
def test_regex_dialect_matches_python(pattern, accept, reject):
    dfa = build_char_dfa(pattern)
    for t in accept:
        assert re.fullmatch(pattern, t, re.ASCII) and dfa.accepts(t), t
    for t in reject:
        assert not re.fullmatch(pattern, t, re.ASCII) and not dfa.accepts(t), t


@pytest.mark.parametrize(
    "pattern, named",
    [
        ("(?P<x>a)(?P=x)", "(?P=x)"),
        (r"(a)\1", r"\1"),
        ("a^b", "anchor ^ inside"),
        (r"a\bb", r"word boundary \b"),
    ],
)
def test_unsupported_constructs_are_named_as_written(pattern, named):
    with pytest.raises(CfsmError) as err:
        build_char_dfa(pattern)
    assert err.value.kind == "unsupported_feature" and named in err.value.message


def test_slow_compile_hint_names_a_wide_alternation():
    from engine.regex.dfa import slow_hint

    enum = "(" + "|".join(f"value{i}" for i in range(1287)) + ")"
    assert "alternation of 1,287 alternatives" in slow_hint(enum)
    assert "counted repeat" in slow_hint("(a|b)*a(a|b){24}")
    # a schema's regex of a megabyte is named by its length, not parsed again for a hint
    assert slow_hint("(ab|cd)" * 200_000).startswith("a 1,400,000-character regex")


def _both(rx: str):
    from engine.regex.automaton import build_neutral
    from engine.regex.dfa import _canonical, _interegular_neutral, validate_regex

    norm = validate_regex(rx)
    a, b = (
        _canonical(rx, d, 10_000)
        for d in (build_neutral(norm, 10_000), _interegular_neutral(norm, 10_000))
    )
    return (a.classes, a.other_class, a.trans, a.finals), (
        b.classes,
        b.other_class,
        b.trans,
        b.finals,
    )


def test_own_dfa_construction_equals_interegulars_on_presets_and_schemas():
    """The DFA is built here (positions, subsets, Hopcroft); interegular, the library it
    replaced, is the oracle: the same canonical automaton, class for class, edge for edge."""
    import json

    from app.presets import REAL_SCHEMAS, presets
    from engine.schema import schema_to_regex

    own = [p for name, p in presets().items() if name not in REAL_SCHEMAS]  # ours: small
    rxs = [p["text"] for p in own if p["kind"] == "regex"]
    rxs += [schema_to_regex(p["text"], "compact") for p in own if p["kind"] == "schema"]
    rxs += ["", "(a|ab)", r"[^\n]*\n", "x(y|)z", "(a?){3}", r"[^\"\\]*", json.dumps("é")[1:-1]]
    for rx in rxs:
        mine, theirs = _both(rx)
        assert mine == theirs, rx[:80]


@settings(max_examples=150, deadline=None)
@given(
    st.recursive(
        st.sampled_from(["a", "b", "[ab]", "[^a]", r"\d", ".", "中", "🙂", "ab", "[a-c]"]),
        lambda c: st.one_of(
            st.tuples(c, c).map("".join),
            st.tuples(c, c).map(lambda t: f"({t[0]}|{t[1]})"),
            st.tuples(c, st.sampled_from(["*", "+", "?", "{2}", "{1,3}", "{0,2}", "{2,}"])).map(
                lambda t: f"({t[0]}){t[1]}"
            ),
        ),
        max_leaves=8,
    )
)
def test_own_dfa_construction_equals_interegulars_on_random_regexes(rx):
    mine, theirs = _both(rx)
    assert mine == theirs
