"""A triggered plan as one llguidance Lark grammar: free text is a lazy lexeme that ends at
the start tag (llguidance's own tool-calling pattern), the thinking a lexeme with the end
marker as its suffix, each segment's content the JSON schema or regex llguidance makes of
that segment's constraint with this project's whitespace policy."""

from __future__ import annotations

import json

from ..constraint import Constraint
from ..lazy import lazy_module
from ..regex.dfa import normalize_regex
from ..triggers.plan import Plan, TriggerOptions
from .json_options import llguidance_json_overrides, llguidance_schema

llg = lazy_module("llguidance")


def _lit(text: str) -> str:
    return json.dumps(text, ensure_ascii=False)


def content_rule(c: Constraint) -> str | None:
    """A constraint as the right-hand side of a Lark rule (None: a grammar answer)."""
    if c.kind == "regex":
        top = json.loads(llg.LLMatcher.grammar_from_regex(normalize_regex(c.text)))
        return top["grammars"][0]["lark_grammar"].removeprefix("start: ")
    if c.kind == "schema":
        opts = llguidance_json_overrides(c)
        schema = llguidance_schema(c)
        top = json.loads(llg.LLMatcher.grammar_from_json_schema(schema, overrides=opts))
        return "%json " + json.dumps(top["grammars"][0]["json_schema"], ensure_ascii=False)
    return None


def _tools_rules(plan: Plan, opts: TriggerOptions) -> list[str]:
    """Rules for `tools`: calls in free text (auto), or calls only, the first one forced."""
    a, z = _lit(opts.tool_start), _lit(opts.tool_end)
    rules = [f"body: {content_rule(plan.constraints[plan.call_slot])}"]
    if plan.first_slot is None:
        return rules + [
            "tools: call* tail",
            "tail: TEXT",
            r"TEXT: /(.|\n)*/",
            f"call_hd[lazy]: TEXT {a}",
            f"call: call_hd body {z}",
        ]
    if plan.first_slot == plan.call_slot:
        return rules + [f"tools: ({a} body {z})+"]
    rules.append(f"first: {content_rule(plan.constraints[plan.first_slot])}")
    return rules + [f"tools: {a} first {z} ({a} body {z})*"]


def lark_for_plan(plan: Plan, opts: TriggerOptions) -> str | None:
    if opts.reasoning and opts.think_budget:
        return None
    if not opts.reasoning:
        return "\n".join(["start: tools", *_tools_rules(plan, opts)]) + "\n"
    if plan.answer_slot is not None:
        answer = content_rule(plan.constraints[plan.answer_slot])
        if answer is None:
            return None
        rules = [f"after: {answer}"]
    else:
        rules = ["after: tools", *_tools_rules(plan, opts)]
    head = "" if opts.think_start.lower() in ("", "none") else f"{_lit(opts.think_start)} "
    rules += [f"start: {head}think after", rf"think[suffix={_lit(opts.think_end)}]: /(.|\n)*/"]
    return "\n".join(rules) + "\n"
