"""Constraints that start on a trigger, as a plan of phases: free text that watches for
trigger texts, fixed tags (written or forced), and bound segments held to a constraint.

Reasoning: `<think>` (forced), free thinking until `</think>` (written by the model, or
forced once the thinking budget is spent), then the constraint to the end. Tool calls: free
text; on `<tool_call>` the call is held to `{"name": NAME, "arguments": ARGS}` until the end
tag is forced, then free text again (several calls per output). The plan names constraints
only; `engine.triggers.matcher` compiles nothing and walks the phases over compiled ones.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..constraint import Constraint
from ..errors import CfsmError
from ..limits import MAX_NEW_TOKENS
from .tools import Tool, call_constraint, parse_tools, tool_format

TOOL_CHOICES = ("auto", "required")
DEFAULT_THINK_START = "<think>"
DEFAULT_THINK_END = "</think>"
DEFAULT_TOOL_START = "<tool_call>"
DEFAULT_TOOL_END = "</tool_call>"
MAX_TAG_CHARS = 64


@dataclass(frozen=True)
class Trigger:
    """A text that, written in free text and ending on a token boundary, opens `next`."""

    text: str
    next: int


@dataclass(frozen=True)
class FreePhase:
    """Nothing is masked or jumped, except what keeps a trigger on a token boundary (and
    the stop, where the output may not end here)."""

    label: str
    triggers: tuple[Trigger, ...] = ()
    may_end: bool = True
    budget: int = 0  # free tokens before `on_budget` is forced (0: no budget)
    on_budget: int | None = None
    kind: str = "free"


@dataclass(frozen=True)
class TagPhase:
    """A fixed text: written token by token where the model writes it, jumped where it is
    forced. With `may_end`, the output may instead end where the tag would begin (the
    choice between another call and the stop)."""

    label: str
    text: str
    next: int
    may_end: bool = False
    kind: str = "tag"


@dataclass(frozen=True)
class BoundPhase:
    """A segment held to `plan.constraints[slot]`; `next` None: the output ends with it."""

    label: str
    slot: int
    next: int | None
    kind: str = "constrained"


Phase = FreePhase | TagPhase | BoundPhase


@dataclass(frozen=True)
class TriggerOptions:
    """What a user asks for (request fields, CLI flags, page controls)."""

    reasoning: bool = False
    think_budget: int = 0
    think_start: str = DEFAULT_THINK_START
    think_end: str = DEFAULT_THINK_END
    tools: str = ""  # OpenAI-style tools as JSON text
    tool_choice: str = "auto"
    tool_start: str = DEFAULT_TOOL_START
    tool_end: str = DEFAULT_TOOL_END

    @property
    def active(self) -> bool:
        return self.reasoning or bool(self.tools.strip())


@dataclass(frozen=True)
class Plan:
    """The phases, the constraints they hold (by slot), and the slots by role, so a
    library's own trigger machinery (engine/backends/*_triggers.py) needs no phase walk."""

    phases: tuple[Phase, ...]
    constraints: tuple[Constraint, ...]
    tools: tuple[Tool, ...] = ()
    start: int = 0
    tool_format: str = "hermes"  # how a call's body names its tool (engine.triggers.tools)
    call_slot: int | None = None  # any call's body
    first_slot: int | None = None  # the call forced first (tool_choice required or a name)
    answer_slot: int | None = None  # what follows the thinking, when it is not tool use

    def tag_texts(self) -> list[str]:
        """Every tag and trigger text (the matcher looks up which are special tokens)."""
        out = [p.text for p in self.phases if isinstance(p, TagPhase)]
        out += [t.text for p in self.phases if isinstance(p, FreePhase) for t in p.triggers]
        return list(dict.fromkeys(out))


def _check_tag(name: str, text: str) -> None:
    if not isinstance(text, str) or not text.strip() or "\x00" in text:
        raise CfsmError("invalid_input", f"{name} must be a text that is not only spaces")
    if len(text) > MAX_TAG_CHARS:
        raise CfsmError("input_too_large", f"{name} is longer than {MAX_TAG_CHARS} characters")


class _Builder:
    """Phases appended in order; an index is known before its phase exists."""

    def __init__(self) -> None:
        self.phases: list[Phase] = []
        self.constraints: list[Constraint] = []
        self.slots: dict[str, int] = {}

    def add(self, phase: Phase) -> int:
        self.phases.append(phase)
        return len(self.phases) - 1

    def slot(self, c: Constraint, role: str) -> int:
        if c not in self.constraints:
            self.constraints.append(c)
        self.slots.setdefault(role, self.constraints.index(c))
        return self.constraints.index(c)

    @property
    def next_index(self) -> int:
        return len(self.phases)

    def plan(self, tools, start: int, fmt: str) -> Plan:
        return Plan(
            tuple(self.phases),
            tuple(self.constraints),
            tools,
            start,
            fmt,
            self.slots.get("call"),
            self.slots.get("first"),
            self.slots.get("answer"),
        )


def _check_tool_options(opts: TriggerOptions, tools: tuple[Tool, ...]) -> str:
    _check_tag("the tool call start tag", opts.tool_start)
    _check_tag("the tool call end tag", opts.tool_end)
    if opts.tool_start == opts.tool_end:
        raise CfsmError("invalid_input", "the tool call start and end tags must differ")
    choice = opts.tool_choice or "auto"
    names = [t.name for t in tools]
    if choice not in TOOL_CHOICES and choice not in names:
        raise CfsmError(
            "invalid_input",
            f"tool_choice must be auto, required or a tool's name ({', '.join(names)}), "
            f"not {choice!r}",
        )
    return choice


def _tools_phases(b: _Builder, opts: TriggerOptions, tools: tuple[Tool, ...]) -> int:
    """Free text with tool calls (or calls only, the first one forced): the entry phase.
    The slot of the first call the output holds comes first, so the automaton a run shows
    is the one its first segment walks."""
    choice = _check_tool_options(opts, tools)
    fmt = tool_format(opts.tool_start)
    if choice != "auto":
        chosen = tuple(t for t in tools if choice in ("required", t.name))
        forced = b.slot(call_constraint(chosen, fmt), "first")
    any_call = b.slot(call_constraint(tools, fmt), "call")
    free = b.next_index  # free text after any call: calls by trigger, EOS allowed
    # the model writes the start tag itself: the call's constraint begins after it
    b.add(FreePhase("text", (Trigger(opts.tool_start, free + 1),), may_end=True))
    b.add(BoundPhase("tool call", any_call, free + 2))
    b.add(TagPhase("tool call end", opts.tool_end, free))
    if choice == "auto":
        return free
    # required (or one named tool): the output is calls only, as with the serving engines'
    # `required`: the forced first call at once, then any call or the stop
    first = b.next_index
    b.add(TagPhase("tool call tag", opts.tool_start, first + 1))
    b.add(BoundPhase("tool call", forced, first + 2))
    b.add(TagPhase("tool call end", opts.tool_end, first + 3))
    b.add(TagPhase("tool call tag", opts.tool_start, first + 4, may_end=True))
    b.add(BoundPhase("tool call", any_call, first + 5))
    b.add(TagPhase("tool call end", opts.tool_end, first + 3))
    return first


def _check_request(opts: TriggerOptions, constraint: Constraint | None, tools) -> None:
    if not opts.active:
        raise CfsmError("invalid_input", "no trigger asked for (reasoning or tools)")
    if tools and constraint is not None:
        raise CfsmError(
            "invalid_input",
            "give tools or a constraint (regex, schema, grammar), not both: the tool calls are "
            "the constraint",
        )
    if not tools and constraint is None:
        raise CfsmError(
            "invalid_input", "reasoning needs a constraint (regex, schema, grammar) or tools"
        )
    if not 0 <= opts.think_budget <= MAX_NEW_TOKENS:
        raise CfsmError(
            "invalid_input", f"think_budget must be between 0 (no budget) and {MAX_NEW_TOKENS}"
        )


def build_plan(opts: TriggerOptions, constraint: Constraint | None) -> Plan:
    """The phases of a triggered request; CfsmError (invalid_input) names what is wrong."""
    tools = parse_tools(opts.tools) if opts.tools.strip() else ()
    _check_request(opts, constraint, tools)
    b = _Builder()
    fmt = tool_format(opts.tool_start)
    if not opts.reasoning:
        return b.plan(tools, _tools_phases(b, opts, tools), fmt)
    _check_tag("the thinking end marker", opts.think_end)
    # [start tag] -> thinking -> end tag -> answer (or tool use)
    head = b.next_index
    if opts.think_start and opts.think_start.lower() != "none":  # "none": the prompt opened it
        _check_tag("the thinking start marker", opts.think_start)
        b.add(TagPhase("thinking start", opts.think_start, head + 1))
    think = b.add(FreePhase("thinking", (), may_end=False))  # triggers filled in below
    end_tag = b.add(TagPhase("thinking end", opts.think_end, -1))
    if tools:
        after = _tools_phases(b, opts, tools)
    else:
        after = b.add(BoundPhase("answer", b.slot(constraint, "answer"), None))
    b.phases[end_tag] = TagPhase("thinking end", opts.think_end, after)
    b.phases[think] = FreePhase(
        "thinking",
        (Trigger(opts.think_end, after),),
        may_end=False,
        budget=opts.think_budget,
        on_budget=end_tag if opts.think_budget else None,
    )
    return b.plan(tools, head, fmt)
