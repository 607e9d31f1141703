import pytest

from engine.errors import CfsmError
from engine.regex.compressed import CompressedFSM
from engine.regex.dfa import build_char_dfa


def cont(pattern: str, prefix: str) -> str:
    return CompressedFSM(build_char_dfa(pattern)).continuation(prefix)


def test_literal_runs_are_jumped():
    assert cont(r'\{"name": "[a-z]+", "age": [0-9]+\}', "") == '{"name": "'
    assert cont(r'\{"name": "[a-z]+", "age": [0-9]+\}', '{"name": "bob') == ""
    assert cont(r'\{"name": "[a-z]+", "age": [0-9]+\}', '{"name": "bob"') == ', "age": '


def test_accepting_state_is_never_jumpable():
    # the final state of [0-9]+[ ]* has one edge (space) but the model may stop there
    assert cont(r"[0-9]+[ ]*", "12 ") == ""
    assert cont(r"ab(c)?", "ab") == ""
    assert cont(r"abc", "") == "abc"


def test_cycles_terminate():
    assert cont(r"(ab)*c", "a") == "b"
    assert cont(r"(ab)*c", "ab") == ""
    assert cont(r"x(abc)+", "xa") == "bc"


def test_multi_character_classes_are_choices():
    assert cont(r"[ab]c", "") == ""
    assert cont(r"[ab]c", "a") == "c"
    assert cont(r'"[^"]*"', '"') == ""


def test_alternation_prefix_after_determinization():
    assert cont(r"(apple|apricot)", "") == "ap"
    assert cont(r"(apple|apricot)", "apr") == "icot"
    assert cont(r"(Pure-blood|Half-blood|Muggle-born)", "H") == "alf-blood"


def test_unicode_literals_and_escapes():
    assert cont(r"中文(abc|abd)", "") == "中文ab"
    assert cont(r"\u4e2d\u6587(abc|abd)", "") == "中文ab"
    assert cont(r"🙂🙃[0-9]", "") == "🙂🙃"
    assert cont(r"\U0001F642x", "") == "🙂x"


def test_prefix_outside_language():
    with pytest.raises(CfsmError) as ei:
        cont(r"abc", "x")
    assert ei.value.kind == "prefix_outside_language"


def test_chains_collapse_single_edge_runs():
    cfsm = CompressedFSM(build_char_dfa(r'\{"a": [0-9]+, "b": true\}'))
    strings = sorted(c.string for c in cfsm.chains)
    assert '{"a": ' in strings
    assert ' "b": true}' in strings
    for c in cfsm.chains:
        # walking the chain string from its start lands on its end
        assert cfsm.dfa.walk(c.string, c.start) == c.end
        for s in c.states[:-1]:
            assert cfsm.is_jumpable(s)
    st = cfsm.stats()
    assert st["jumpable_states"] == len(cfsm.jumpable_states) > 0


def test_character_regex_stats(character_regex):
    cfsm = CompressedFSM(build_char_dfa(character_regex))
    assert cfsm.continuation("") == '{\n    "name": "'
    assert (
        cfsm.continuation('{\n    "name": "Harry",\n    "house": "G')
        == 'ryffindor",\n    "blood status": "'
    )
    assert cfsm.stats()["longest_chain"] >= len('",\n    "house": "')
