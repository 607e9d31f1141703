"""A triggered plan as one xgrammar structural tag (triggered tags, tags with a separator,
a thinking tag whose free text has a token budget), printed as EBNF: the compile cache then
compiles it like any grammar, in its killable worker. Each constrained segment's content is
the EBNF xgrammar makes of that segment's constraint, with this project's whitespace
policy, so the native run holds the same language as the engine's trigger layer."""

from __future__ import annotations

import json

from ..constraint import Constraint
from ..regex.dfa import normalize_regex
from ..triggers.plan import BoundPhase, FreePhase, Plan, TagPhase, TriggerOptions


def content_ebnf(c: Constraint) -> str:
    """A constraint as xgrammar EBNF (no tokenizer needed)."""
    import xgrammar as xgr

    if c.kind == "regex":
        return str(xgr.Grammar.from_regex(normalize_regex(c.text)))
    if c.kind == "schema":
        ws = c.ws
        return str(
            xgr.Grammar.from_json_schema(
                json.dumps(c.schema_obj()),
                any_whitespace=ws.flexible,
                separators=None if ws.flexible else ws.separators,
                max_whitespace_cnt=1 if ws.flexible else None,
                strict_mode=not c.spec,
            )
        )
    return c.text


def _tag(begin: str, c: Constraint, end: str):
    from xgrammar.structural_tag import GrammarFormat, TagFormat

    return TagFormat(begin=begin, content=GrammarFormat(grammar=content_ebnf(c)), end=end)


def _tools_format(plan: Plan, opts: TriggerOptions, entry: int):
    """The tool-call phases from `entry` on: calls in free text (auto), or calls only."""
    from xgrammar.structural_tag import SequenceFormat, TagsWithSeparatorFormat, TriggeredTagsFormat

    p = plan.phases[entry]
    any_call = next(q for q in plan.phases if isinstance(q, BoundPhase))
    every = _tag(opts.tool_start, plan.constraints[any_call.slot], opts.tool_end)
    if isinstance(p, FreePhase):
        return TriggeredTagsFormat(triggers=[opts.tool_start], tags=[every])
    first = plan.phases[p.next]  # the forced first call's body
    rest = TagsWithSeparatorFormat(tags=[every], separator="", at_least_one=False)
    if first.slot == any_call.slot:
        return TagsWithSeparatorFormat(tags=[every], separator="", at_least_one=True)
    forced = _tag(opts.tool_start, plan.constraints[first.slot], opts.tool_end)
    return SequenceFormat(elements=[forced, rest])


def structural_tag_ebnf(plan: Plan, opts: TriggerOptions) -> str:
    """The plan's language as EBNF from xgrammar's structural tag."""
    import xgrammar as xgr
    from xgrammar.structural_tag import (
        AnyTextFormat,
        GrammarFormat,
        SequenceFormat,
        StructuralTag,
        TagFormat,
    )

    if not opts.reasoning:
        fmt = _tools_format(plan, opts, plan.start)
    else:
        think = next(i for i, p in enumerate(plan.phases) if p.label == "thinking")
        after = plan.phases[think].triggers[0].next
        p = plan.phases[after]
        answer = (
            GrammarFormat(grammar=content_ebnf(plan.constraints[p.slot]))
            if isinstance(p, BoundPhase) and p.next is None
            else _tools_format(plan, opts, after)
        )
        start = plan.phases[plan.start]
        begin = start.text if isinstance(start, TagPhase) else ""
        budget = opts.think_budget or None
        thinking = TagFormat(
            begin=begin, content=AnyTextFormat(max_tokens=budget), end=opts.think_end
        )
        fmt = SequenceFormat(elements=[thinking, answer])
    return str(xgr.Grammar.from_structural_tag(StructuralTag(format=fmt)))
