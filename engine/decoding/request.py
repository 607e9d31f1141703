"""What a user asks for: one decoding request, validated before anything runs."""

from __future__ import annotations

from dataclasses import Field, dataclass, field, fields

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
EXTENSION = "extension"  # an Offer's `v1`: a top-level body field of the field's own name


@dataclass(frozen=True)
class Offer:
    """How one request field is offered to users, declared once beside the field: its help
    line, its bounds and choices (`validate` checks them), and its name on each surface
    that offers it (None: not offered there). The CLI's flags are built from it
    (`--max-new-tokens`; a requests file's keys are the field names), /v1's extension
    fields are read from it, and a test holds the page's controls, the Gradio `/run`
    parameters and /v1's OpenAI fields to it."""

    help: str
    lo: float | None = None
    hi: float | None = None
    choices: tuple[str, ...] = ()
    cli: bool = True
    page: str | None = None  # the Playground's control (PageInputs field)
    page_default: object = None  # where the page starts elsewhere than the engine
    gradio: str | None = None  # the Gradio `/run` parameter
    v1: str | None = None  # the /v1 body field: OpenAI's own name, or EXTENSION


def offered(default, help: str, **kw):
    """A request field with its Offer (dataclasses.field metadata)."""
    return field(default=default, metadata={"offer": Offer(help, **kw)})


@dataclass
class GenerateRequest:
    prompt: str
    constraint: Constraint | None = None
    mode: str = offered(
        "jump",
        "free, masked or jump (default: jump under a constraint or tools, else free)",
        choices=MODES,
        page="mode",
        gradio="mode",
        v1=EXTENSION,
    )
    backend: str = offered(
        DEFAULT_BACKEND,
        "grammar backend (auto: fsm where it compiles, else a native one that enforces it)",
        page="backend",
        gradio="backend",
        v1=EXTENSION,
    )
    max_new_tokens: int = offered(
        256,
        "tokens to generate at most",
        lo=1,
        hi=MAX_NEW_TOKENS_LIMIT,
        page="max_new",
        page_default=200,
        gradio="max_new_tokens",
        v1="max_tokens",
    )
    temperature: float = offered(
        0.0, "sampling temperature (0: greedy; OpenAI's range)", lo=0, hi=2, page="temp",
        gradio="temperature",
        v1="temperature",
    )  # fmt: skip
    top_p: float = offered(1.0, "nucleus sampling mass, in (0, 1]", hi=1, page="top_p", v1="top_p")
    seed: int = offered(0, "sampling seed", page="seed", gradio="seed", v1="seed")
    raw_prompt: bool = offered(
        False, "send the prompt as is (no chat template)"
    )  # /v1: the completions endpoint's
    # a chat as OpenAI messages (JSON text), rendered with the model's chat template (with
    # `tools` where given); `prompt` then only names the request in the page
    messages: str = offered("", "a chat as OpenAI messages (JSON)", cli=False, v1="messages")
    jump_threshold: int = offered(1, "jump only strings longer than this many characters", lo=0)
    healing_tokens: int = offered(2, "tokens to back off at a jump boundary", lo=0)
    top_k: int = offered(
        10, "alternatives kept per step for the trace", lo=1, hi=100, cli=False
    )  # /v1: from top_logprobs
    # per-step allowed samples and masks for the visualizer
    trace_detail: bool = offered(True, "per-step samples and masks in the trace", cli=False)
    # the whole prompt computed, no kept prompt shared: Compare's sides start from the same
    # cache state whatever other users left kept (not offered: Compare sets it)
    cold_prompt: bool = False
    # "transformers" or "llamacpp"; empty: the engine's default (the CLI's --runtime is the
    # engine's, with the model flags)
    runtime: str = offered(
        "", "what runs the model (auto, or a runtime's name)", cli=False, page="runtime",
        page_default="auto", gradio="runtime", v1=EXTENSION,
    )  # fmt: skip
    # triggered constraints (engine.triggers): free reasoning first, or tool calls in free text
    reasoning: bool = offered(
        False,
        "free thinking up to the end marker, then the constraint (or the tools)",
        page="reasoning",
        gradio="reasoning",
        v1=EXTENSION,
    )
    think_budget: int = offered(
        0,
        "force the end marker after this many free thinking tokens (0: no limit)",
        lo=0,
        hi=MAX_NEW_TOKENS_LIMIT,
        page="think_budget",
        gradio="think_budget",
        v1=EXTENSION,
    )
    think_start: str = offered(
        DEFAULT_THINK_START, 'forced at the start ("none": the prompt opens it)'
    )
    think_end: str = offered(DEFAULT_THINK_END, "the thinking's end marker")
    tools: str = offered(
        "", "OpenAI-style tools (JSON; the CLI also takes a file)", page="tools", v1="tools"
    )
    tool_choice: str = offered(
        "auto", "auto, required or a tool's name", page="tool_choice", gradio="tool_choice",
        v1="tool_choice",
    )  # fmt: skip
    tool_start: str = offered(
        DEFAULT_TOOL_START, "a tool call's opening tag", page="tool_start", gradio="tool_start"
    )
    tool_end: str = offered(
        DEFAULT_TOOL_END, "a tool call's closing tag", page="tool_end", gradio="tool_end"
    )
    # who finds the triggers: "native" (the backend's own machinery, xgrammar's structural
    # tags), "engine" (the engine's trigger layer, every backend), "auto": native where the
    # backend has it
    trigger_impl: str = offered(
        "auto",
        "who finds the triggers: native (the backend's own, xgrammar's structural tags), "
        "engine (every backend), or auto: native where the backend has it",
        choices=TRIGGER_IMPLS,
        page="trigger_impl",
        gradio="trigger_impl",
        v1=EXTENSION,
    )

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
        """Each declared bound and choice (`Offer`), then what ties fields together."""
        for f, offer in offers():
            _check(f.name, getattr(self, f.name), offer)
        if not 0 < self.top_p:
            raise CfsmError("invalid_input", "top_p must be in (0, 1]")
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
        if opts.active:
            build_plan(opts, self.constraint)  # bad tools or tags say so before any model loads
        for name in ("prompt", "messages"):
            n = len(getattr(self, name))
            if n > MAX_PROMPT_CHARS:
                raise CfsmError(
                    "input_too_large",
                    f"{name} is {n} characters; the limit is {MAX_PROMPT_CHARS}",
                )
        if self.runtime not in ("", "auto", *runtime_names()):
            raise CfsmError(
                "invalid_input",
                f"runtime must be one of auto, {', '.join(runtime_names())}, not {self.runtime!r}",
            )

    def trigger_options(self) -> TriggerOptions:
        """The request's trigger fields, by the names the two share."""
        return TriggerOptions(**{f.name: getattr(self, f.name) for f in fields(TriggerOptions)})


def offers() -> list[tuple[Field, Offer]]:
    """The request's fields that users set, each with its Offer, in declaration order."""
    return [(f, f.metadata["offer"]) for f in fields(GenerateRequest) if "offer" in f.metadata]


def offered_on(surface: str) -> dict[str, str]:
    """{field name: its name on `surface`} ("cli": the flag, "page", "gradio", "v1")."""
    if surface == "cli":
        return {f.name: "--" + f.name.replace("_", "-") for f, o in offers() if o.cli}
    return {f.name: getattr(o, surface) for f, o in offers() if getattr(o, surface)}


def page_default(name: str):
    """Where the page (and Gradio's `/run`) starts the field `name`."""
    f, offer = next((f, o) for f, o in offers() if f.name == name)
    return f.default if offer.page_default is None else offer.page_default


def _check(name: str, value, offer: Offer) -> None:
    """One field against its declared choices and bounds (`invalid_input` naming it)."""
    if offer.choices and value not in offer.choices:
        raise CfsmError(
            "invalid_input", f"{name} must be one of {', '.join(offer.choices)}, not {value!r}"
        )
    lo, hi = offer.lo, offer.hi
    if (lo is not None and value < lo) or (hi is not None and value > hi):
        if lo is not None and hi is not None:
            raise CfsmError("invalid_input", f"{name} must be between {lo:g} and {hi:g}")
        bound = f">= {lo:g}" if lo is not None else f"<= {hi:g}"
        raise CfsmError("invalid_input", f"{name} must be {bound}")


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
