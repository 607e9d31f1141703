"""The decoder: one model + tokenizer context turned into `Sequence`s and run by a
scheduler. `run` decodes one request (a batch of one), `run_many` a fixed batch, and
`serve` starts the continuous batcher that concurrent sessions share."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable

from ..backends import CompiledConstraint, TokenizerContext
from ..errors import CfsmError
from ..runtimes.base import Runner
from ..triggers.plan import DEFAULT_TOOL_END, DEFAULT_TOOL_START
from ..triggers.tool_prompt import (
    PROBE_TOOL,
    has_past_calls,
    last_called,
    probe_call_turns,
    with_past_calls,
    with_tools,
)
from ..triggers.tools import parse_tools
from .model import LoadedModel
from .request import GenerateRequest
from .scheduler import ContinuousBatcher, PassCounts, run_to_completion
from .sequence import Sequence
from .token_text import TokenText
from .trace import Trace

REMEASURE_EVERY_S = 60.0  # the cost model is measured again at most this often
TOOL_TAGS = (DEFAULT_TOOL_START, DEFAULT_TOOL_END)  # a call's start and end tags


def _render(tok, msgs: list[dict], tools: list | None = None) -> str:
    """The chat template's text (a plain `role: content` list where the tokenizer has no
    template). A template that cannot render the messages is the user's `invalid_input`
    (a tool message to a model without tool support, say)."""
    if not getattr(tok, "chat_template", None):
        return "\n".join(f"{m.get('role')}: {m.get('content') or ''}" for m in msgs) + "\n"
    kw = {"tools": tools} if tools else {}
    try:
        return tok.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True, **kw)
    except Exception as exc:  # noqa: BLE001 - jinja's errors name the template's problem
        raise CfsmError(
            "invalid_input", f"the model's chat template cannot render these messages: {exc}"
        ) from exc


def chat_text(tok, msgs: list[dict], tools: str = "", tags: tuple[str, str] = TOOL_TAGS) -> str:
    """The prompt's text, with the tools where given: the template's own rendering where
    it renders them (its text changes with them), else the messages with a system block
    that lists them and an example call in `tags` (engine.triggers.tool_prompt), so a
    model whose template ignores tools still learns the start tag the trigger waits for."""
    called = last_called(msgs)
    if has_past_calls(msgs) and not renders_past_calls(tok):
        msgs = with_past_calls(msgs, *tags)
    if not tools.strip():
        return _render(tok, msgs)
    if getattr(tok, "chat_template", None):
        own = _render(tok, msgs, json.loads(tools))
        if own != _render(tok, msgs):
            return own
    return _render(tok, with_tools(msgs, parse_tools(tools), *tags, called))


def renders_past_calls(tok) -> bool:
    """Whether the tokenizer's chat template writes an assistant turn's `tool_calls`
    (Qwen's, Llama 3.1's do; SmolLM2's and templates without tool support do not)."""
    if not getattr(tok, "chat_template", None):
        return False
    try:
        return PROBE_TOOL in _render(tok, probe_call_turns())
    except CfsmError:
        return False


def chat_ids(tok, messages: str, tools: str = "", tags: tuple[str, str] = TOOL_TAGS) -> list[int]:
    """OpenAI messages (JSON text) through the tokenizer's chat template, with the tools."""
    text = chat_text(tok, json.loads(messages), tools, tags)
    special = not getattr(tok, "chat_template", None)  # a template writes its own
    return list(tok.encode(text, add_special_tokens=special))


class Decoder:
    def __init__(self, lm: LoadedModel, ctx: TokenizerContext | None = None) -> None:
        self.lm = lm
        self.ctx = ctx or TokenizerContext(lm.tokenizer, lm.vocab_size, lm.eos_token_id)
        self.vocab = self.ctx.vocab
        self.texts = TokenText(self.ctx)
        self.runner = lm.runner
        self._lock = (
            threading.Lock()
        )  # one scheduler step (or one whole run) on the model at a time
        self._batcher: ContinuousBatcher | None = None
        # a disagreeing run has the cost model measured again (at most every
        # REMEASURE_EVERY_S); a benchmark that times whole calls turns it off
        self.remeasure_costs = True
        self._next_measure = 0.0

    def prompt_ids(
        self,
        prompt: str,
        raw: bool,
        messages: str = "",
        tools: str = "",
        tags: tuple[str, str] = TOOL_TAGS,
    ) -> list[int]:
        """The model's input: a chat's messages (and tools, shown with the call `tags`)
        through the chat template; a prompt as one user message, or as it is (`raw`: no
        template, no tools)."""
        tok = self.lm.tokenizer
        if messages:
            return chat_ids(tok, messages, tools, tags)
        if not raw and (getattr(tok, "chat_template", None) or tools.strip()):
            return chat_ids(tok, json.dumps([{"role": "user", "content": prompt}]), tools, tags)
        return list(tok.encode(prompt, add_special_tokens=True))

    def request_ids(self, req: GenerateRequest) -> list[int]:
        """A request's prompt, rendered as every surface (page, CLI, /v1) renders it."""
        tags = (req.tool_start, req.tool_end)
        return self.prompt_ids(req.prompt, req.raw_prompt, req.messages, req.tools, tags)

    def model_info(self) -> dict:
        """The model card the trace, the CLI and the page show."""
        return {
            "name": self.lm.name,
            "device": self.lm.device,
            "dtype": self.lm.dtype,
            "vocab_size": self.ctx.vocab_size,
            "eos_token_id": self.ctx.eos_token_id,
            "architecture": self.lm.architecture,
            "runtime": self.runner.name,
            "runtime_note": self.lm.runtime_note,
            # the runner's current model (measured again after a disagreeing run)
            "costs": self.runner.costs.to_json()
            if self.runner.costs is not None
            else (self.lm.self_check or {}).get("costs"),
            "tokenizer": self.ctx.continuation.traits.to_json(),
            # llama.cpp: the thread count of each kind of pass now (chosen as it runs), and
            # the one-token step's as measured at load
            "pass_threads": self.runner.pass_threads(),
            **{k: v for k, v in (self.lm.self_check or {}).items() if k == "step_ms_by_threads"},
        }

    def sequence(
        self,
        req: GenerateRequest,
        compiled: CompiledConstraint | None = None,
        on_event: Callable[[str, dict], None] | None = None,
        should_stop: Callable[[], bool] | None = None,
    ) -> Sequence:
        """A validated request as a sequence ready to be scheduled."""
        req.validate()
        if req.mode != "free" and compiled is None:
            raise CfsmError("invalid_input", "a constrained mode needs a compiled constraint")
        return Sequence(
            req,
            compiled if req.mode != "free" else None,
            self.ctx,
            self.texts,
            self.request_ids(req),
            self.runner,
            on_event,
            should_stop,
        )

    def run(
        self,
        req: GenerateRequest,
        compiled: CompiledConstraint | None = None,
        on_event: Callable[[str, dict], None] | None = None,
        should_stop: Callable[[], bool] | None = None,
    ) -> Trace:
        """Decode one request here and now (the CLI and the benchmarks)."""
        seq = self.sequence(req, compiled, on_event, should_stop)
        with self._lock:
            run_to_completion(self.runner, [seq])
        return self._result(seq, {"kind": "single", "max_batch": 1})

    def run_many(self, seqs: list[Sequence]) -> PassCounts:
        """Decode a fixed batch together until every request is done."""
        with self._lock:
            return run_to_completion(self.runner, seqs)

    def serve(self, max_batch: int = 16) -> ContinuousBatcher:
        """The continuous batcher (started once): concurrent requests share forward passes."""
        if self._batcher is not None:
            return self._batcher
        with self._lock:
            if self._batcher is None:
                self._batcher = ContinuousBatcher(self.runner, self._lock, max_batch)
            return self._batcher

    def submit(
        self,
        req: GenerateRequest,
        compiled: CompiledConstraint | None = None,
        on_event: Callable[[str, dict], None] | None = None,
        should_stop: Callable[[], bool] | None = None,
    ) -> Trace:
        """Decode one request in the running batch (blocks until it is done)."""
        batcher = self.serve()
        seq = batcher.submit(self.sequence(req, compiled, on_event, should_stop)).result()
        return self._result(seq, {"kind": "continuous", "max_batch": batcher.max_batch})

    def _result(self, seq: Sequence, scheduler: dict) -> Trace:
        if seq.error is not None:
            raise seq.error
        trace = seq.finish(self.model_info(), scheduler)
        if not seq.n.batched_passes:  # a batch's passes cost more than one request's
            self._check_costs(trace.totals.run_step_ms, trace.totals.clock, seq.prompt_ids)
        return trace

    def idle(self) -> bool:
        """No request decoding or waiting in the continuous batch (a moment's answer)."""
        return self._batcher is None or self._batcher.idle()

    def load(self) -> tuple[int, int]:
        """(requests decoding, requests waiting) in the continuous batch; (0, 0) before it
        starts. A moment's answer, for a server's metrics."""
        return (0, 0) if self._batcher is None else self._batcher.load()

    def _check_costs(self, step_ms: float, clock: str, prompt_ids: list[int]) -> None:
        """The load-time cost model, measured again when a run's own one-token passes
        disagree with it by more than CostModel.DISAGREE (a busy machine at load skews it),
        at once if the runtime is idle (never waiting for a running batch)."""
        costs = self.runner.costs
        if not self.remeasure_costs or costs is None or clock != "this run":
            return
        if not costs.disagrees(step_ms) or time.monotonic() < self._next_measure:
            return
        if not self.idle():
            return  # others are decoding: their passes are not this one's to time
        if self._lock.acquire(blocking=False):
            try:
                # the costs only: the step's thread count stays as measured at load
                Runner.measure_costs(self.runner, prompt_ids[:8] or [0])
                self._next_measure = time.monotonic() + REMEASURE_EVERY_S
            finally:
                self._lock.release()

    def close(self) -> None:
        if self._batcher is not None:
            self._batcher.close()
