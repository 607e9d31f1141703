"""A triggered plan as one xgrammar structural tag (triggered tags, tags with a separator,
a thinking tag whose free text has a token budget), printed as EBNF: the compile cache then
compiles it like any grammar, in its killable worker. Each constrained segment's content is
the EBNF xgrammar makes of that segment's constraint, with this project's whitespace
policy, so the native run holds the same language as the engine's trigger layer."""

from __future__ import annotations

import json

from ..constraint import Constraint
from ..lazy import lazy_module
from ..regex.dfa import normalize_regex
from ..triggers.plan import Plan, TriggerOptions
from .json_options import xgrammar_json_options

xgr = lazy_module("xgrammar")
st = lazy_module("xgrammar.structural_tag")


def content_ebnf(c: Constraint) -> str:
    """A constraint as xgrammar EBNF (no tokenizer needed)."""
    if c.kind == "regex":
        return str(xgr.Grammar.from_regex(normalize_regex(c.text)))
    if c.kind == "schema":
        return str(
            xgr.Grammar.from_json_schema(json.dumps(c.schema_obj()), **xgrammar_json_options(c))
        )
    return c.text


def _tag(begin: str, c: Constraint, end: str):
    return st.TagFormat(begin=begin, content=st.GrammarFormat(grammar=content_ebnf(c)), end=end)


def _tools_format(plan: Plan, opts: TriggerOptions):
    """Calls in free text (tool choice auto), or calls only, the first one forced."""
    every = _tag(opts.tool_start, plan.constraints[plan.call_slot], opts.tool_end)
    if plan.first_slot is None:
        return st.TriggeredTagsFormat(triggers=[opts.tool_start], tags=[every])
    if plan.first_slot == plan.call_slot:
        return st.TagsWithSeparatorFormat(tags=[every], separator="", at_least_one=True)
    forced = _tag(opts.tool_start, plan.constraints[plan.first_slot], opts.tool_end)
    rest = st.TagsWithSeparatorFormat(tags=[every], separator="", at_least_one=False)
    return st.SequenceFormat(elements=[forced, rest])


def structural_tag_ebnf(plan: Plan, opts: TriggerOptions) -> str:
    """The plan's language as EBNF from xgrammar's structural tag."""
    fmt = _tools_format(plan, opts) if plan.tools else None
    if opts.reasoning:
        answer = fmt
        if plan.answer_slot is not None:
            answer = st.GrammarFormat(grammar=content_ebnf(plan.constraints[plan.answer_slot]))
        begin = "" if opts.think_start.lower() in ("", "none") else opts.think_start
        budget = opts.think_budget or None
        thinking = st.TagFormat(
            begin=begin, content=st.AnyTextFormat(max_tokens=budget), end=opts.think_end
        )
        fmt = st.SequenceFormat(elements=[thinking, answer])
    return str(xgr.Grammar.from_structural_tag(st.StructuralTag(format=fmt)))
