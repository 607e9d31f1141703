"""Trigger detection and the phase walk over small hand-made vocabularies: a trigger split
across tokens, inside a longer token, or one special token; rollback across a trigger;
budget forcing; the stop masked while thinking. No model weights."""

from __future__ import annotations

import json

import numpy as np
import pytest

from engine.backends import get_backend
from engine.backends.base import TokenizerContext
from engine.constraint import Constraint
from engine.errors import CfsmError
from engine.triggers.matcher import TriggeredConstraint
from engine.triggers.plan import TriggerOptions, build_plan

# id 0 is the stop; the others spell bytes
PIECES = [
    None,
    "a",
    "b",
    " ",
    "<",
    "/",
    "think",
    ">",
    "</",
    "thin",
    "k>",
    "k>y",
    "x</think>",
    "x</think>y",
    "</think>",
    "{",
    "}",
    "1",
    "2",
    ">\n",
    "<think>",
]
EOS = 0
# one tool whose one argument is 1 or 2
ENUM_TOOL = json.dumps(
    [
        {
            "type": "function",
            "function": {
                "name": "f",
                "parameters": {
                    "type": "object",
                    "properties": {"n": {"enum": [1, 2]}},
                    "required": ["n"],
                },
            },
        }
    ]
)


def _ctx() -> TokenizerContext:
    return TokenizerContext.from_token_bytes(
        [None if p is None else p.encode() for p in PIECES], EOS
    )


def ids(*texts: str) -> list[int]:
    return [PIECES.index(t) for t in texts]


def _triggered(ctx, opts: TriggerOptions, constraint: Constraint | None = None):
    plan = build_plan(opts, constraint)
    fsm = get_backend("fsm")
    return TriggeredConstraint(plan, [fsm.compile(c, ctx) for c in plan.constraints], ctx)


@pytest.fixture(scope="module")
def think():
    """Reasoning then the regex `[12]+`; no start tag (the prompt opened the thinking)."""
    ctx = _ctx()
    return ctx, _triggered(
        ctx, TriggerOptions(reasoning=True, think_start="none"), Constraint("regex", "[12]+")
    )


def test_a_trigger_split_across_tokens_opens_the_constraint(think):
    ctx, c = think
    m = c.matcher()
    for t in ids("a", "<", "/", "think"):
        assert m.accept_token(t) and m.state_info()["free"]
    assert PIECES.index(">\n") not in m.allowed_ids()  # it would run past the marker's end
    assert m.accept_token(ids(">")[0])
    assert not m.state_info()["free"] and m.retokenize_from() == 5
    assert set(m.allowed_ids().tolist()) == set(ids("1", "2"))  # the constraint's first tokens


def test_a_token_running_past_a_trigger_is_masked_and_refused(think):
    ctx, c = think
    m = c.matcher()
    assert PIECES.index("x</think>y") not in m.allowed_ids()
    assert PIECES.index("x</think>") in m.allowed_ids()
    assert PIECES.index("x</think>y") in m.mask("cpu").tolist()  # a ban list of a few ids
    assert not m.accept_token(PIECES.index("x</think>y")) and m.state_info()["free"]
    # halfway through the marker, `k>y` would run past it; `k>` ends on it
    for t in ids("</", "thin"):
        assert m.accept_token(t)
    assert PIECES.index("k>y") not in m.allowed_ids() and PIECES.index("k>") in m.allowed_ids()
    assert m.accept_token(PIECES.index("k>")) and not m.state_info()["free"]


def test_a_trigger_inside_a_longer_token_that_ends_on_it(think):
    _, c = think
    m = c.matcher()
    assert m.accept_token(PIECES.index("x</think>"))
    assert not m.state_info()["free"] and m.retokenize_from() == 1


def test_rollback_across_a_trigger_returns_to_free_text(think):
    _, c = think
    m = c.matcher()
    for t in ids("a", "</", "thin", "k>", "1"):
        assert m.accept_token(t)
    assert m.segments()[-1]["kind"] == "constrained" and m.is_final()
    m.rollback(2)  # `1` and `k>`: back inside the marker
    assert m.state_info()["free"] and len(m.segments()) == 1
    assert PIECES.index("k>y") not in m.allowed_ids()  # the scanner's state came back too
    assert m.accept_token(PIECES.index("k>")) and m.accept_token(PIECES.index("2"))
    with pytest.raises(ValueError):
        m.rollback(99)


def test_the_stop_is_masked_while_thinking_and_allowed_after_the_answer(think):
    _, c = think
    m = c.matcher()
    assert EOS not in m.allowed_ids() and EOS in m.mask("cpu").tolist()
    assert not m.accept_token(EOS) and not m.is_final()
    m.accept_token(PIECES.index("x</think>"))
    m.accept_token(PIECES.index("1"))
    assert EOS in m.allowed_ids() and m.is_final()


def test_budget_forcing_forces_the_end_marker_then_the_constraint():
    ctx = _ctx()
    c = _triggered(
        ctx, TriggerOptions(reasoning=True, think_budget=3), Constraint("regex", "[12]+")
    )
    m = c.matcher()
    assert m.jump_forward() == "<think>"  # the start tag is forced first
    assert m.accept_token(PIECES.index("<think>")) and m.state_info()["free"]
    for t in ids("a", "b", "a"):
        assert m.accept_token(t)
    assert m.segments()[-1]["label"] == "thinking end" and m.jump_forward() == "</think>"
    # masked decoding: only tokens spelling a prefix of the marker are allowed
    assert set(m.allowed_ids().tolist()) == set(ids("<", "</", "</think>"))
    assert m.accept_token(PIECES.index("</think>"))
    assert m.segments()[-1]["kind"] == "constrained"


def test_a_special_token_marker_triggers_by_id():
    from cfsm.bench.tiny_models import build_tokenizer

    tok = build_tokenizer("byte_level")
    tok.add_special_tokens({"additional_special_tokens": ["<think>", "</think>"]})
    ctx = TokenizerContext(tok, len(tok) + 8)
    end = tok.convert_tokens_to_ids("</think>")
    assert ctx.vocab.token_bytes[end] is None  # no text spells it
    c = _triggered(ctx, TriggerOptions(reasoning=True), Constraint("regex", "yes|no"))
    m = c.matcher()
    start = tok.convert_tokens_to_ids("<think>")
    assert m.allowed_ids().tolist() == [start] and m.jump_forward() == ""  # forced, not jumped
    assert m.accept_token(start)
    for t in ctx.continuation.encode("ok"):
        assert m.accept_token(t) and m.state_info()["free"]
    assert m.accept_token(end) and not m.state_info()["free"]
    assert m.jump_forward() == ""  # `yes` or `no`: a choice


def test_required_tool_choice_allows_only_calls_and_the_stop(ctx):
    """The embedded tokenizer (no weights): the call is forced at once, its body held to
    the tool's schema, and after its end tag only another call or the stop may follow."""
    tools = ENUM_TOOL
    c = _triggered(ctx, TriggerOptions(tools=tools, tool_choice="required"))
    m = c.matcher()
    assert m.jump_forward() == "<tool_call>"
    for t in ctx.continuation.encode("<tool_call>"):
        assert m.accept_token(t)
    assert m.jump_forward() == '{"name": "f", "arguments": {"n": '
    hello = ctx.continuation.encode("Hello")[0]
    assert not m.accept_token(hello)  # free text is not allowed inside the call
    for t in ctx.continuation.encode('{"name": "f", "arguments": {"n": 2}}'):
        assert m.accept_token(t)
    assert m.segments()[-1]["label"] == "tool call end" and m.jump_forward() == "</tool_call>"
    for t in ctx.continuation.encode("</tool_call>"):
        assert m.accept_token(t)
    allowed = set(m.allowed_ids().tolist())
    assert ctx.eos_token_id in allowed and hello not in allowed and m.is_final()
    assert ctx.continuation.encode("<tool_call>")[0] in allowed
    valid, why, segs = c.check_output(m, ctx.vocab.token_bytes, _walked(ctx), True, "eos")
    assert valid and [s["kind"] for s in segs] == ["tag", "constrained", "tag"], why  # no empty tag


def _walked(ctx) -> list[int]:
    enc = ctx.continuation.encode
    return enc("<tool_call>") + enc('{"name": "f", "arguments": {"n": 2}}') + enc("</tool_call>")


@pytest.mark.parametrize(
    "opts, constraint, words",
    [
        (TriggerOptions(tools="[1]"), None, "tool 1 is not an object"),
        (TriggerOptions(tools="{"), None, "not valid JSON"),
        (TriggerOptions(tools='[{"type": "function", "function": {"name": "a b"}}]'), None, "name"),
        (
            TriggerOptions(tools='[{"function": {"name": "f", "parameters": {"type": 3}}}]'),
            None,
            "tool 'f': invalid JSON schema",
        ),
        (
            TriggerOptions(tools='[{"function": {"name": "f"}}, {"function": {"name": "f"}}]'),
            None,
            "unique",
        ),
        (
            TriggerOptions(tools='[{"function": {"name": "f"}}]', tool_choice="g"),
            None,
            "tool_choice",
        ),
        (
            TriggerOptions(tools='[{"function": {"name": "f"}}]'),
            Constraint("regex", "a"),
            "not both",
        ),
        (TriggerOptions(reasoning=True), None, "needs a constraint"),
        (TriggerOptions(tools="[" * 90_000 + "]" * 90_000), None, "nested too deeply"),
        (
            TriggerOptions(tools='[{"function": {"name": "f"}}]', tool_start="  "),
            None,
            "not only spaces",
        ),
        (
            TriggerOptions(tools='[{"function": {"name": "f"}}]', tool_start="<x>", tool_end="<x>"),
            None,
            "must differ",
        ),
        (
            TriggerOptions(reasoning=True, think_budget=10**9),
            Constraint("regex", "a"),
            "think_budget must be between",
        ),
        (TriggerOptions(reasoning=True, think_end=""), Constraint("regex", "a"), "end marker"),
        (TriggerOptions(reasoning=True, think_budget=-1), Constraint("regex", "a"), "between 0"),
    ],
)
def test_bad_trigger_options_are_one_line_errors(opts, constraint, words):
    with pytest.raises(CfsmError) as ei:
        build_plan(opts, constraint)
    assert words in ei.value.message and "\n" not in ei.value.message


def test_free_text_masks_nothing_where_no_trigger_is_under_way():
    ctx = _ctx()
    tools = '[{"function": {"name": "f"}}]'
    c = _triggered(ctx, TriggerOptions(tools=tools, tool_start="<think>", tool_end=">\n"))
    m = c.matcher()
    assert m.mask("cpu") is None and m.allowed_count() == ctx.vocab_size and m.is_final()
    assert np.array_equal(m.allowed_ids(), np.arange(ctx.vocab_size))


@pytest.mark.parametrize("temperature, top_p", [(0.0, 1.0), (0.9, 1.0), (0.9, 0.8)])
def test_sampling_with_a_ban_list_equals_sampling_with_its_mask(temperature, top_p):
    """Free text excludes a few ids by a ban list: it becomes the same bitmask row as the
    bool mask that excludes those ids, and the pick and the numbers the trace keeps are
    those of that mask applied by hand."""
    import torch

    from engine.decoding.request import GenerateRequest
    from engine.decoding.sampling import SamplePack, pack_sizes, select_batch
    from engine.tokens.bitmask import mask_row

    torch.manual_seed(0)
    logits = torch.randn(5000) * 3
    banned = torch.topk(logits, 3).indices  # the three most likely: the pick must move
    mask = torch.ones(5000, dtype=torch.bool)
    mask[banned] = False
    req = GenerateRequest(prompt="x", temperature=temperature, top_p=top_p, mode="free")
    rows = [mask_row(m, 5000) for m in (mask, banned)]
    assert torch.equal(rows[0], rows[1])  # the same bitmask row either way
    sizes = pack_sizes(req, True, 5000)
    gen = torch.Generator().manual_seed(7)
    got = select_batch(logits[None], rows[0][None], [req], [gen], [sizes])
    a = SamplePack.read(got[0].tolist(), *sizes)
    # reference: the mask applied by hand
    probs = torch.softmax(logits, -1)
    kept = torch.where(mask, probs, -1.0)
    feasible = float(probs[mask].sum())
    top = torch.topk(kept, sizes[1])
    if temperature <= 0:
        want = int(top.indices[0])
    else:
        gen = torch.Generator().manual_seed(7)
        p = torch.softmax(logits.masked_fill(~mask, float("-inf")) / temperature, -1)
        if top_p < 1.0:
            sp, si = torch.sort(p, descending=True)
            sp = sp * ((torch.cumsum(sp, -1) - sp) < top_p)
            want = int(si[torch.multinomial(sp / sp.sum(), 1, generator=gen)[0]])
        else:
            want = int(torch.multinomial(p, 1, generator=gen)[0])
    assert a.token_id == want and a.token_id not in banned.tolist()
    assert a.feasible_mass == pytest.approx(feasible, rel=1e-5)
    assert a.prob == pytest.approx(float(probs[want]) / feasible, rel=1e-5)
    assert [i for i, _ in a.masked_top] == top.indices.tolist()


def test_a_start_tag_ending_in_equals_takes_the_name_then_the_arguments(ctx):
    """The Llama 3.1 template: <function=NAME>{ARGS}</function>."""
    tools = json.dumps(
        [
            {
                "function": {
                    "name": "get_time",
                    "parameters": {
                        "type": "object",
                        "properties": {"city": {"enum": ["Oslo", "Rome"]}},
                        "required": ["city"],
                    },
                }
            },
            {"function": {"name": "get_date", "parameters": {"type": "object"}}},
        ]
    )
    opts = TriggerOptions(tools=tools, tool_start="<function=", tool_end="</function>")
    c = _triggered(ctx, opts)
    m = c.matcher()
    walked = []
    for piece in ("Sure. <function=", "get_", "time>", '{"city": "Oslo"}', "</function>"):
        ids = ctx.continuation.encode(piece)
        walked += ids
        for t in ids:
            assert m.accept_token(t), piece
        if piece == "get_":
            assert m.jump_forward() == ""  # time or date: a choice
        if piece == "time>":
            assert m.jump_forward() == '{"city": "'
    valid, why, segs = c.check_output(m, ctx.vocab.token_bytes, walked, True, "eos")
    assert valid and "get_time: arguments valid" in segs[1]["validation"], why
    from engine.triggers.tools import check_call, parse_tools

    bad = check_call(parse_tools(tools), 'get_time>{"city": "Paris"}', "function")
    assert bad[0] is False and "Paris" in bad[1]


def test_a_native_run_reads_its_segments_back_from_the_text(ctx):
    """A library's own trigger machinery keeps no segments: the plan reads them back from
    the finished text, and each call's body is checked as on the engine's path."""
    from engine.triggers.native import text_segments

    tools = ENUM_TOOL
    plan = build_plan(TriggerOptions(tools=tools), None)
    text = 'Hi <tool_call>{"name": "f", "arguments": {"n": 3}}</tool_call> ok'
    ids = ctx.continuation.encode(text)
    recs = text_segments(plan, ctx.vocab.token_bytes, ids, True)
    assert [(r.kind, r.text) for r in recs] == [
        ("free", "Hi <tool_call>"),
        ("constrained", '{"name": "f", "arguments": {"n": 3}}'),
        ("tag", "</tool_call>"),
        ("free", " ok"),
    ]
    assert recs[1].valid is False and "3" in recs[1].validation  # n=3 is not in its enum
    spelled = b"".join(ctx.vocab.token_bytes[t] for t in ids[recs[1].start : recs[1].end])
    assert spelled.decode().startswith('{"name"')  # token ranges follow the characters


def test_a_call_whose_arguments_could_go_on_is_closed_by_its_end_tag_not_the_stop(ctx):
    """Arguments that may end in more than one place (a number): where they could end, the
    stop is not allowed (the end tag must follow), the end tag's first token closes the
    call, and rolling that token back reopens it."""
    tools = json.dumps([{"function": {"name": "f", "parameters": {"type": "integer"}}}])
    c = _triggered(
        ctx, TriggerOptions(tools=tools, tool_start="<function=", tool_end="</function>")
    )
    m = c.matcher()
    for t in ctx.continuation.encode("<function=f>12"):
        assert m.accept_token(t)
    eos = ctx.eos_token_id
    close = ctx.continuation.encode("</function>")
    assert eos not in m.allowed_ids() and not m.accept_token(eos) and not m.is_final()
    assert close[0] in m.allowed_ids() and bool(m.mask("cpu")[close[0]]) and not m.mask("cpu")[eos]
    n = len(m.segments())
    assert m.accept_token(close[0]) and m.segments()[-1]["label"] == "tool call end"
    m.rollback(1)
    assert len(m.segments()) == n and m.segments()[-1]["label"] == "tool call"
    digit = ctx.continuation.encode("3")[0]
    assert m.accept_token(digit)  # the number goes on
    for t in close:
        assert m.accept_token(t)
    assert m.segments()[-1]["kind"] == "free" and m.is_final()
