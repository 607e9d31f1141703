"""The page's inputs by name. Handlers take Gradio's dict of component -> value and read it
as one typed `PageInputs` (a constraint, a request, a permalink from it); outputs are set
by name through `Row`. Widget facts that values from outside are checked against (choices,
ranges) are written once here."""

from __future__ import annotations

import urllib.parse
from dataclasses import dataclass, fields

import gradio as gr

from engine.backends import BACKEND_CHOICES, DEFAULT_BACKEND
from engine.constraint import KINDS, Constraint
from engine.decoding.request import TRIGGER_IMPLS, GenerateRequest, offered_on, page_default
from engine.decoding.trace import Trace
from engine.errors import CfsmError
from engine.schema import WHITESPACE_POLICIES as WS
from engine.triggers.plan import DEFAULT_TOOL_END, DEFAULT_TOOL_START

from .layout import CUSTOM, RUNTIME_CHOICES

MODES = ["jump", "masked", "free"]  # the page's order: the technique first
PAGE_KINDS = (*KINDS, "tools")
CHOICES = {"ws": WS, "backend": BACKEND_CHOICES, "mode": MODES, "runtime": RUNTIME_CHOICES}
RANGES = {"max_new": (1, 512), "temp": (0, 2), "top_p": (0.05, 1), "seed": (0, 2**31)}
TEXT_BOX = {"regex": "rx", "schema": "sch", "grammar": "gram", "tools": "tools"}
# the request fields `PageInputs.triggers` reads (the Tools box's only when Tools is chosen)
TRIGGER_FIELDS = (
    "reasoning",
    "think_budget",
    "trigger_impl",
    "tools",
    "tool_choice",
    "tool_start",
    "tool_end",
)


class Row:
    """A handler's outputs by name (the Playground's widget names): the widget list for
    the wiring, and per call the values, every output not named left as it is."""

    def __init__(self, *names: str) -> None:
        self.names = names

    def widgets(self, ui) -> list:
        return [getattr(ui, n) for n in self.names]

    def set(self, **kw) -> list:
        unknown = set(kw) - set(self.names)
        if unknown:
            raise KeyError(f"not outputs of this handler: {sorted(unknown)}")
        return [kw.get(n, gr.skip()) for n in self.names]

    def __add__(self, other: Row) -> Row:
        return Row(*self.names, *other.names)


# reasoning and tool calls (engine.triggers): the Tools box and the reasoning row
TRIGGER_INPUTS = Row(
    "tools", "tool_choice", "tool_start", "tool_end", "reasoning", "think_budget", "trigger_impl"
)
# The inputs an uploaded trace restores, and those a permalink or a preset sets.
RUN_INPUTS = Row(
    "kind", "ctabs", "rx", "sch", "gram", "prompt", "ws", "backend", "mode", "max_new", "temp",
    "top_p", "seed", "runtime",
)  # fmt: skip
RESTORED_INPUTS = RUN_INPUTS + Row("lenient", "spec", "preset") + TRIGGER_INPUTS
PERMALINK_INPUTS = RUN_INPUTS + Row("model", "preset", "lenient", "spec") + TRIGGER_INPUTS
PRESET_INPUTS = (
    Row("kind", "ctabs", "rx", "sch", "gram", "prompt", "ws", "mode", "backend", "tools_err")
    + TRIGGER_INPUTS
)


@dataclass
class PageInputs:
    """What the Playground's controls hold when a handler runs (field = widget name)."""

    kind: str = "regex"
    rx: str = ""
    sch: str = ""
    gram: str = ""
    ws: str = "compact"
    prompt: str = ""
    model: str = ""
    # the request's controls start where its declaration says (`page_default`)
    backend: str = page_default("backend")
    mode: str = page_default("mode")
    max_new: int = page_default("max_new_tokens")
    temp: float = page_default("temperature")
    top_p: float = page_default("top_p")
    seed: int = page_default("seed")
    collapse: bool = True
    whole: bool = False
    lenient: bool = False
    spec: bool = False
    runtime: str = page_default("runtime")
    raw: bool = False  # raw character classes in the graph (a view control)
    trace: Trace | None = None  # the run shown now (a gr.State): what a failed run puts back
    tools: str = page_default("tools")
    tool_choice: str = page_default("tool_choice")
    tool_start: str = page_default("tool_start")
    tool_end: str = page_default("tool_end")
    reasoning: bool = page_default("reasoning")
    think_budget: int = page_default("think_budget")
    trigger_impl: str = page_default("trigger_impl")

    @staticmethod
    def widgets(ui, *extra) -> set:
        """The components a handler takes: every Playground input, and `extra` of its own."""
        return {getattr(ui, f.name) for f in fields(PageInputs)} | set(extra)

    @classmethod
    def read(cls, ui, values: dict) -> PageInputs:
        """From Gradio's {component: value} (inputs given as a set)."""
        got = {f.name: getattr(ui, f.name) for f in fields(cls)}
        return cls(**{name: values[c] for name, c in got.items() if c in values})

    @classmethod
    def from_preset(cls, p: dict) -> PageInputs:
        """The inputs a fresh page holds once preset `p` is picked (a benchmark's page)."""
        names = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in preset_inputs(p).items() if k in names})

    def compare_requests(self, sides) -> tuple[list[GenerateRequest], list[str]]:
        """Compare's two requests and their configs ("mode / backend / whitespace"), one
        per side's (mode, backend, whitespace): the Run's request with those replaced."""
        reqs, configs = [], []
        for m, b, w in sides:
            c = self.run_constraint(m, w)
            reqs.append(
                self.request(
                    m != "free", mode=m, backend=b, constraint=c, runtime="", trace_detail=False
                )
            )
            configs.append(f"{m} / {b} / {w}")
        return reqs, configs

    def text(self) -> str:
        return getattr(self, TEXT_BOX.get(self.kind, "rx")) or ""

    def constraint(self, ws: str | None = None) -> Constraint:
        """The constraint of the chosen kind (the Tools choice holds tools, not one)."""
        if self.kind == "tools":
            raise CfsmError(
                "invalid_input", "the Tools choice holds tools, not a regex, schema or grammar"
            )
        ws = ws or self.ws
        return Constraint.from_inputs(self.kind, self.text(), ws, self.lenient, self.spec)

    def run_constraint(self, mode: str | None = None, ws: str | None = None) -> Constraint | None:
        """A run's constraint: none for free decoding, none from the Tools choice (its tool
        calls are the constraint)."""
        if (mode or self.mode) == "free" or self.kind == "tools":
            return None
        return self.constraint(ws)

    def triggers(self) -> dict:
        """The request fields of the Tools box (when it is the chosen kind) and the
        reasoning row."""
        out = {
            "reasoning": bool(self.reasoning),
            "think_budget": int(number(self.think_budget, 0, 10**9, 0)),
            "trigger_impl": self.trigger_impl or "auto",
        }
        if self.kind == "tools":
            out.update(tools=self.tools or "", tool_choice=self.tool_choice or "auto")
            out.update(tool_start=self.tool_start or "", tool_end=self.tool_end or "")
        return out

    def request(self, with_triggers: bool = True, **over) -> GenerateRequest:
        """The Run's request (triggers on a free run are refused by name, not dropped);
        `over` replaces fields: Compare's sides, the trace detail."""
        mode = over.pop("mode", self.mode)
        # every request field the page offers, by its control's name (the declaration's);
        # the triggers' as `triggers` reads them
        kw = {
            name: getattr(self, control)
            for name, control in offered_on("page").items()
            if name not in TRIGGER_FIELDS
        }
        kw.update(mode=mode, **(self.triggers() if with_triggers else {}))
        c = over.pop("constraint", None) or self.run_constraint(mode)
        return GenerateRequest.from_inputs(self.prompt, c, **{**kw, **over})

    def permalink(self) -> str:
        """A link that puts these inputs back (the page's load reads it, `on_load`)."""
        q = {
            "kind": self.kind,
            "c": self.text(),
            "ws": self.ws,
            "prompt": self.prompt,
            "backend": self.backend,
            "mode": self.mode,
            "max": int(self.max_new),
            "temp": self.temp,
            "top_p": self.top_p,
            "seed": int(self.seed or 0),
        }
        if self.runtime and self.runtime != "auto":
            q["runtime"] = self.runtime
        if self.model and self.model != "embedded":
            q["model"] = self.model
        if self.kind == "schema" and (self.lenient or self.spec):
            q.update({k: 1 for k in ("lenient", "spec") if getattr(self, k)})
        t = self.triggers()
        if t["reasoning"]:
            q.update(reasoning=1, budget=t["think_budget"])
        if t["trigger_impl"] != "auto":
            q["impl"] = t["trigger_impl"]
        if self.kind == "tools":
            q.update(choice=t["tool_choice"], tstart=t["tool_start"], tend=t["tool_end"])
        url = "?" + urllib.parse.urlencode(q)
        if len(url) > 8000:
            return "Permalink unavailable: the inputs are too long for a URL (download the trace instead)."  # noqa: E501
        return f"[Permalink to these inputs]({url})"


def number(v, lo, hi, default):
    try:
        x = float(v)
    except (TypeError, ValueError):
        return default
    return min(hi, max(lo, x))


def text_inputs(kind: str, text: str) -> dict:
    """The constraint kind, its choice and its text box (the other boxes keep theirs)."""
    return {"kind": kind, "ctabs": kind, TEXT_BOX[kind]: text}


def trigger_inputs(
    tools=None, choice="auto", start=None, end=None, reasoning=False, budget=0, impl=None
):
    """The Tools box and reasoning row, by widget name (a preset, an uploaded trace, a
    permalink); the tags keep their defaults where none is given."""
    out = {
        "tool_choice": choice or "auto",
        "tool_start": start or DEFAULT_TOOL_START,
        "tool_end": end or DEFAULT_TOOL_END,
        "reasoning": bool(reasoning),
        "think_budget": int(number(budget, 0, 512, 0)),
        "trigger_impl": impl if impl in TRIGGER_IMPLS else "auto",
    }
    if tools:
        out["tools"] = tools
    return out


def preset_inputs(p: dict) -> dict:
    """What picking preset `p` puts on the page, by widget name (other widgets keep theirs)."""
    triggers = trigger_inputs(
        None,
        p.get("tool_choice"),
        p.get("tool_start"),
        p.get("tool_end"),
        p.get("reasoning"),
        p.get("think_budget"),
    )
    return {
        **text_inputs(p["kind"], p["text"]),
        **triggers,
        "prompt": p["prompt"],
        "ws": p["whitespace"],
        "mode": p["mode"],
        "backend": p.get("backend", DEFAULT_BACKEND),
    }


def checked_inputs(raw: dict) -> dict:
    """Widget values from outside (a permalink, an uploaded trace), by widget name: a
    choice outside its list or a number that does not read is left out (that widget keeps
    its value), a number is clamped to its widget's range."""
    out = {k: raw[k] for k, allowed in CHOICES.items() if raw.get(k) in allowed}
    for name, (lo, hi) in RANGES.items():
        x = number(raw.get(name), lo, hi, None)
        if x is not None:
            out[name] = x
    return out


def restore_inputs(trace: Trace) -> dict:
    """An uploaded trace's inputs by widget name (RESTORED_INPUTS); what the trace does
    not say is left out, so that widget keeps its value. The preset becomes 'edited'."""
    r = trace.request
    c = r.get("constraint") or {}
    out: dict = {
        "lenient": bool(c.get("lenient", False)),
        "spec": bool(c.get("spec", False)),
        "preset": CUSTOM,
    }
    if c.get("kind") in KINDS:
        out.update(text_inputs(c["kind"], c.get("text", "")))
    if r.get("tools"):
        out.update(text_inputs("tools", r["tools"]))
    keys = ("tool_choice", "tool_start", "tool_end", "reasoning", "think_budget", "trigger_impl")
    out.update(trigger_inputs(None, *(r.get(k) for k in keys)))
    if "prompt" in r:
        out["prompt"] = r["prompt"]
    raw = {
        "ws": c.get("whitespace"),
        "backend": trace.backend,
        "mode": trace.mode,
        "runtime": r.get("runtime") or None,
        "max_new": r.get("max_new_tokens"),
        "temp": r.get("temperature"),
        "top_p": r.get("top_p"),
        "seed": r.get("seed"),
    }
    return {**out, **checked_inputs(raw)}


def permalink_inputs(q: dict) -> dict:
    """A permalink's query as widget values (PERMALINK_INPUTS); what it lacks keeps its
    value, what does not read is left out."""
    k = q.get("kind", "regex") if q.get("kind") in PAGE_KINDS else "regex"
    out = {**text_inputs(k, q.get("c", "")), "preset": CUSTOM}
    keys = ("choice", "tstart", "tend")
    out.update(trigger_inputs(None, *(q.get(x) for x in keys), q.get("reasoning") == "1",
                              q.get("budget"), q.get("impl")))  # fmt: skip
    out.update({name: q[name] for name in ("prompt", "model") if name in q})
    out.update({name: q.get(name) == "1" for name in ("lenient", "spec")})
    names = {"max_new": "max", "temp": "temp", "top_p": "top_p", "seed": "seed"}
    raw = {name: q.get(names.get(name, name)) for name in (*names, "ws", "backend", "mode")}
    return {**out, **checked_inputs({**raw, "runtime": q.get("runtime")})}
