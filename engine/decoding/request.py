"""What a user asks for: one decoding request, validated before anything runs."""

from __future__ import annotations

from dataclasses import dataclass, fields

from ..backends import DEFAULT_BACKEND
from ..constraint import Constraint
from ..errors import CfsmError
from ..limits import MAX_NEW_TOKENS as MAX_NEW_TOKENS_LIMIT
from ..limits import MAX_PROMPT_CHARS
from ..triggers.plan import (
    DEFAULT_THINK_END,
    DEFAULT_THINK_START,
    DEFAULT_TOOL_END,
    DEFAULT_TOOL_START,
    TriggerOptions,
    build_plan,
)
from .model_runtimes import runtime_names

MODES = ("free", "masked", "jump")
TRIGGER_IMPLS = ("auto", "native", "engine")


@dataclass
class GenerateRequest:
    prompt: str
    constraint: Constraint | None = None
    mode: str = "jump"
    backend: str = DEFAULT_BACKEND
    max_new_tokens: int = 256
    temperature: float = 0.0
    top_p: float = 1.0
    seed: int = 0
    raw_prompt: bool = False
    # a chat as OpenAI messages (JSON text), rendered with the model's chat template (with
    # `tools` where given); `prompt` then only names the request in the page
    messages: str = ""
    jump_threshold: int = 1
    healing_tokens: int = 2
    top_k: int = 10
    trace_detail: bool = True  # per-step allowed samples and masks for the visualizer
    runtime: str = ""  # "transformers" or "llamacpp"; empty: the engine's default
    # triggered constraints (engine.triggers): free reasoning first, or tool calls in free text
    reasoning: bool = False
    think_budget: int = 0  # free thinking tokens before the end marker is forced (0: none)
    think_start: str = DEFAULT_THINK_START  # forced at the start ("" when the prompt opens it)
    think_end: str = DEFAULT_THINK_END
    tools: str = ""  # OpenAI-style tools, JSON text
    tool_choice: str = "auto"  # auto, required or a tool's name
    tool_start: str = DEFAULT_TOOL_START
    tool_end: str = DEFAULT_TOOL_END
    # who finds the triggers: "native" (the backend's own machinery, xgrammar's structural
    # tags), "engine" (the engine's trigger layer, every backend), "auto": native where the
    # backend has it
    trigger_impl: str = "auto"

    @classmethod
    def from_inputs(cls, prompt, constraint: Constraint | None, **inputs) -> GenerateRequest:
        """The one place a request is built from user inputs (page, API, CLI flags, a
        requests line): a missing or empty value takes the default, numbers are coerced,
        the mode defaults to jump under a constraint and free without one, and the result
        is validated. A bad value is `invalid_input`, never a TypeError."""
        known = {f.name: f for f in fields(cls)}
        unknown = sorted(set(inputs) - set(known))
        if unknown:
            raise CfsmError("invalid_input", f"unknown request field(s): {', '.join(unknown)}")
        kw: dict = {}
        try:
            for name, value in inputs.items():
                if value is None or value == "":
                    continue
                kw[name] = _coerce(known[name].default, value)
        except (TypeError, ValueError) as exc:
            raise CfsmError("invalid_input", f"bad request field: {exc}") from exc
        tools = str(kw.get("tools") or "").strip()
        kw.setdefault("mode", "jump" if constraint is not None or tools else "free")
        req = cls(prompt="" if prompt is None else str(prompt), constraint=constraint, **kw)
        req.validate()
        return req

    def validate(self) -> None:
        if self.mode not in MODES:
            raise CfsmError(
                "invalid_input", f"mode must be one of {', '.join(MODES)}, not {self.mode!r}"
            )
        opts = self.trigger_options()
        if opts.reasoning and self.constraint is None and not opts.tools.strip():
            raise CfsmError(
                "invalid_input", "reasoning needs a constraint (regex, schema, grammar) or tools"
            )
        if self.mode != "free" and self.constraint is None and not opts.tools.strip():
            raise CfsmError(
                "invalid_input",
                f"mode {self.mode!r} needs a constraint (regex, schema or grammar) or tools",
            )
        if self.mode == "free" and opts.active:
            raise CfsmError(
                "invalid_input",
                "reasoning and tools constrain part of the output: use mode jump or masked",
            )
        if self.trigger_impl not in TRIGGER_IMPLS:
            raise CfsmError(
                "invalid_input",
                f"trigger_impl must be one of {', '.join(TRIGGER_IMPLS)}, "
                f"not {self.trigger_impl!r}",
            )
        if opts.active:
            build_plan(opts, self.constraint)  # bad tools or tags say so before any model loads
        for name in ("prompt", "messages"):
            n = len(getattr(self, name))
            if n > MAX_PROMPT_CHARS:
                raise CfsmError(
                    "input_too_large",
                    f"{name} is {n} characters; the limit is {MAX_PROMPT_CHARS}",
                )
        if not 1 <= self.max_new_tokens <= MAX_NEW_TOKENS_LIMIT:
            raise CfsmError(
                "invalid_input", f"max_new_tokens must be between 1 and {MAX_NEW_TOKENS_LIMIT}"
            )
        if self.temperature < 0 or not 0 < self.top_p <= 1:
            raise CfsmError("invalid_input", "temperature must be >= 0 and top_p in (0, 1]")
        if self.healing_tokens < 0 or self.jump_threshold < 0:
            raise CfsmError("invalid_input", "healing_tokens and jump_threshold must be >= 0")
        if self.runtime not in ("", "auto", *runtime_names()):
            raise CfsmError(
                "invalid_input",
                f"runtime must be one of auto, {', '.join(runtime_names())}, not {self.runtime!r}",
            )
        if not 1 <= self.top_k <= 100:
            raise CfsmError("invalid_input", "top_k must be between 1 and 100")

    def trigger_options(self) -> TriggerOptions:
        """The request's trigger fields, by the names the two share."""
        return TriggerOptions(**{f.name: getattr(self, f.name) for f in fields(TriggerOptions)})


def _coerce(default, value):
    """A user's value as the field's type: numbers from text or JSON, and booleans that
    read "false" as false (bool("false") is True)."""
    if isinstance(default, bool):
        if isinstance(value, str):
            if value.strip().lower() not in ("true", "false", "1", "0", "yes", "no"):
                raise ValueError(f"{value!r} is not a boolean")
            return value.strip().lower() in ("true", "1", "yes")
        return bool(value)
    if isinstance(default, (int, float, str)):
        return type(default)(value)
    return value
