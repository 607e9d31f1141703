"""The trace: the JSON contract between the engine, viz/ and app/, typed once here.

Version history: 1 = first release; 2 = records built from these dataclasses, plus
`valid`/`validation` (the finished output checked against the constraint), `scheduler`
(how the request was decoded: single, batch or continuous), `steps[].batch_size`
(requests in the forward pass that produced the step's logits) and `totals.queue_s` (time
waiting to join a running batch); 3 = `jump_skips` (each jump the automaton forced but the
engine could not make exact, with the reason) and `totals.jumps_skipped`; 4 = `segments`
(a triggered constraint's free, tag and constrained stretches, each checked) and
`steps[].segment`, and the request's trigger fields; 5 = `replay` (another engine's output
walked through the automaton: mode "replay", one step per token of that engine; absent from
decoded runs). Older traces load
and are upgraded with defaults.
Readers check `version` and refuse newer ones.
"""

from __future__ import annotations

import base64
import hashlib
import json
import zlib
from collections import Counter
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

from ..errors import CfsmError
from ..lazy import lazy_module

np = lazy_module("numpy")  # viz and app read traces without numpy otherwise

TRACE_VERSION = 6
MAX_SKIPS_IN_TRACE = 200  # every skip is counted in the totals; the first ones are listed
REQUIRED_KEYS = ("version", "mode", "text", "tokens", "steps", "jumps", "totals")


def _drop_none(d: dict, keys: tuple[str, ...]) -> dict:
    for k in keys:
        if d.get(k) is None:
            d.pop(k, None)
    return d


@dataclass
class StepRecord:
    """One sampling decision (a forward pass's logits, masked and sampled)."""

    index: int
    char_state: int | None
    token_state: int | None
    allowed: int
    token_id: int
    token_text: str
    origin: str  # model | forced
    prob: float
    raw_prob: float
    feasible_mass: float
    top_raw: list
    top_masked: list
    forward_ms: float
    mask_us: float
    sample_us: float
    output_len: int
    batch_size: int = 1
    jump: int | None = None
    verifies: list | None = None  # [id, text]: a backed-off token being re-decided
    verified: bool | None = None
    grammar_us: float | None = None
    char_offset: int | None = None
    allowed_sample: list | None = None
    mask_key: str | None = None
    segment: int | None = None  # the trace's `segments` entry it belongs to (triggered runs)
    # {id: hex} of the `top_raw` alternatives whose bytes are not whole UTF-8 characters
    # (their text reads `<F0 9F>`): /v1 logprobs report a token's own bytes
    top_hex: dict | None = None

    OPTIONAL = (
        "verifies",
        "verified",
        "grammar_us",
        "char_offset",
        "allowed_sample",
        "mask_key",
        "segment",
        "top_hex",
    )

    def to_json(self) -> dict:
        return _drop_none(asdict(self), self.OPTIONAL)


@dataclass
class LiveToken:
    """An output token as a listener sees it while the run decodes."""

    id: int
    text: str
    origin: str  # model | forced | jump
    step: int  # the step that produced it (-1: the jump before the first step)


@dataclass
class StepEvent:
    """What each decoding step tells a listener (the page streams it): the step, every
    output token so far and the running counts. Not part of the trace file. `snapshot`
    gives the trace so far (the page's live step view); it reads the sequence's state, so
    call it inside the listener (decoding waits meanwhile), never later or elsewhere."""

    step: StepRecord
    tokens: list[LiveToken]
    forward_passes: int
    jumps: int
    elapsed_s: float
    snapshot: Callable[[], Any] | None = None


@dataclass
class WaitEvent:
    """A pass this request sat out because the runtime's KV cache had no room for it (the
    page says so while it waits): passes held so far and requests running before it."""

    held_passes: int
    ahead: int
    recomputed_tokens: int


@dataclass
class JumpRecord:
    """One jump-forward: the string, the re-tokenization and the prefill it cost."""

    string: str
    char_start: int
    tokens_before: list
    tokens_after: list
    backed_off: list
    retokenize_us: float
    step: int = -1
    reused_output_tokens: int = 0
    prefilled: int = 0
    prefilled_tokens: list = field(default_factory=list)
    forward_ms: float = 0.0
    candidates: int = 0

    def to_json(self) -> dict:
        return asdict(self)


@dataclass
class JumpSkip:
    """A jump the automaton forced but the engine did not make: the forced text was decoded
    token by token instead. Never silent: the reason says why, for this jump."""

    step: int
    string: str
    char_start: int
    reason: str

    def to_json(self) -> dict:
        return asdict(self)


@dataclass
class Totals:
    forward_passes: int
    output_tokens: int
    prompt_tokens: int
    prefilled_tokens: int
    steps: int
    model_steps: int
    forced_steps: int
    jumped_tokens: int
    jumps: int
    jumped_chars: int
    wall_s: float
    decode_s: float
    prefill_ms: float
    forward_s: float
    grammar_s: float
    grammar_us_per_step: float
    sample_us_per_step: float
    forward_ms_per_pass: float
    tokens_per_s: float | None
    compile_s: float
    finished: bool
    reason: str
    queue_s: float = 0.0
    jumps_skipped: int = 0
    # the runtime's cost model (measured at load) applied to this run's passes, and to the
    # same output decoded masked (the prompt, then one step per output token): jump-forward's
    # time saved on this runtime, free of the machine's noise during the run
    est_forward_ms: float = 0.0
    est_masked_ms: float = 0.0
    runtime: str = ""  # what ran the forward passes: transformers or llamacpp
    # prompt positions shared from the previous request's kept prompt, not computed
    prompt_cached_tokens: int = 0
    # this run compiled nothing: compile_s is the time the cached constraint once took
    compile_cached: bool = False
    # under KV-cache pressure (llama.cpp): passes this request waited for cells, and its
    # tokens computed again after the runtime evicted every request to make room
    kv_held_passes: int = 0
    recomputed_tokens: int = 0
    # this run's own clock (engine.decoding.run_clock): the mean of its one-token passes, its
    # passes at that mean (jumps as measured), and the same output decoded masked timed
    # alike; `clock` says where the step came from ("this run", or "load-time model" for a
    # run that made no one-token pass). Time saved = 1 - run_forward_ms / run_masked_ms.
    run_step_ms: float = 0.0
    run_forward_ms: float = 0.0
    run_masked_ms: float = 0.0
    clock: str = ""
    # this run's later many-token passes (jumps): how many, their tokens, what each cost in
    # this run's steps, and what the load-time cost model says the same passes cost in its
    # steps; far more on the run than in the model means the machine was busy (page: why
    # a run lost time)
    run_jump_passes: int = 0
    run_jump_tokens: int = 0
    run_jump_in_steps: float = 0.0
    model_jump_in_steps: float = 0.0

    def time_saved(self) -> float | None:
        """Jump-forward's decode time saved against the same output decoded masked, on this
        run's own clock (older traces: on the load-time cost model); None without figures."""
        if self.run_masked_ms:
            return 1 - self.run_forward_ms / self.run_masked_ms
        if self.est_masked_ms:
            return 1 - self.est_forward_ms / self.est_masked_ms
        return None

    @classmethod
    def from_json(cls, obj: dict) -> Totals:
        """A trace file's `totals` (keys this version does not know are dropped)."""
        return _record(cls, obj, "totals")


@dataclass
class RunClock:
    step_ms: float = 0.0
    forward_ms: float = 0.0
    masked_ms: float = 0.0
    source: str = ""
    jump_passes: int = 0
    jump_tokens: int = 0
    jump_in_steps: float = 0.0  # a jump pass's mean time over the run's step
    model_jump_in_steps: float = 0.0  # the same passes in the load-time cost model


@dataclass
class Trace:
    request: dict
    model: dict
    backend: str | None
    mode: str
    prompt_tokens: int
    text: str
    tokens: list[dict]
    steps: list[StepRecord]
    jumps: list[JumpRecord]
    masks: dict[str, str]
    totals: Totals
    scheduler: dict
    version: int = TRACE_VERSION
    valid: bool | None = (
        None  # the finished output checked against the constraint (engine.decoding.validate)
    )
    validation: str = ""
    warnings: list[str] = field(default_factory=list)  # keywords compiled unenforced (--lenient)
    # added by the service after decoding, when the constraint has them
    compile: dict | None = None
    regex: str | None = None
    automaton: dict | None = None
    ideal: dict | None = None
    # where an output stopped at max_new_tokens was unbounded (engine.analysis.unbounded)
    unfinished: dict | None = None
    jump_skips: list[JumpSkip] = field(default_factory=list)
    # a triggered constraint's stretches (free, tag, constrained), each checked; empty when
    # the constraint holds over the whole output (engine.triggers)
    segments: list[dict] = field(default_factory=list)
    replay: dict | None = None  # a replayed output's engine, savings and violations
    backend_why: str = ""  # why `auto` chose `backend` (engine.backends.choose); "" if asked

    def to_json(self) -> dict:
        out: dict[str, Any] = {
            "version": self.version,
            "request": self.request,
            "model": self.model,
            "backend": self.backend,
            "backend_why": self.backend_why,
            "mode": self.mode,
            "scheduler": self.scheduler,
            "prompt_tokens": self.prompt_tokens,
            "text": self.text,
            "valid": self.valid,
            "validation": self.validation,
            "warnings": list(self.warnings),
            "tokens": self.tokens,
            "steps": [s.to_json() for s in self.steps],
            "jumps": [j.to_json() for j in self.jumps],
            "jump_skips": [s.to_json() for s in self.jump_skips],
            "segments": self.segments,
            "masks": self.masks,
            "totals": asdict(self.totals),
        }
        for k in ("compile", "regex", "automaton", "ideal", "replay"):
            v = getattr(self, k)
            if v is not None or k == "ideal" and self.automaton is not None and not self.replay:
                out[k] = v
        if self.unfinished is not None:
            out["unfinished"] = self.unfinished
        return out

    @classmethod
    def from_json(cls, obj) -> Trace:
        """A trace file, a download or `to_json()`'s output, back as the typed object: checked
        and upgraded by `validate_trace` first (so an older version loads with its defaults,
        a newer one or a malformed one raises CfsmError invalid_input, naming the field)."""
        obj = validate_trace(obj)
        plain = {k: obj[k] for k in _PLAIN_FIELDS if k in obj}
        try:
            return cls(
                request=obj.get("request") or {},
                model=obj.get("model") or {},
                backend=obj.get("backend"),
                prompt_tokens=int(obj.get("prompt_tokens") or 0),
                masks=obj.get("masks") or {},
                scheduler=obj.get("scheduler") or {},
                steps=[_record(StepRecord, x, "steps") for x in obj["steps"]],
                jumps=[_record(JumpRecord, x, "jumps") for x in obj["jumps"]],
                jump_skips=[_record(JumpSkip, x, "jump_skips") for x in obj.get("jump_skips", [])],
                totals=Totals.from_json(obj["totals"]),
                **plain,
            )
        except (TypeError, ValueError) as exc:
            raise CfsmError("invalid_input", f"not a cfsm trace: {exc}") from exc


# the fields from_json copies as they are (the others it builds or defaults itself)
_BUILT = ("request", "model", "backend", "prompt_tokens", "masks", "scheduler", "steps", "jumps")
_PLAIN_FIELDS = tuple(
    k for k in Trace.__dataclass_fields__ if k not in _BUILT + ("jump_skips", "totals")
)


def _record(kind, obj, where: str):
    """One nested record of a loaded trace; keys this version does not know are dropped
    (a reader never fails on an addition), a missing required one names where."""
    if not isinstance(obj, dict):
        raise CfsmError("invalid_input", f"not a cfsm trace: an entry of {where} is not an object")
    known = kind.__dataclass_fields__
    try:
        return kind(**{k: v for k, v in obj.items() if k in known})
    except TypeError as exc:
        raise CfsmError("invalid_input", f"not a cfsm trace: {where}: {exc}") from exc


@dataclass
class Counters:
    """What a request's forward passes and grammar work cost, summed as it decodes."""

    forward_passes: int = 0
    forward_s: float = 0.0
    grammar_s: float = 0.0
    prefilled_tokens: int = 0
    prefill_ms: float | None = None
    # new tokens per pass -> passes of that size (the cost model prices them at the end)
    pass_sizes: Counter[int] = field(default_factory=Counter)
    prompt_cached_tokens: int = 0
    kv_held_passes: int = 0
    recomputed_tokens: int = 0
    step_ms: list[float] = field(default_factory=list)  # this run's one-token passes
    multi_ms: list[float] = field(default_factory=list)  # its later many-token passes (jumps)
    multi_tokens: list[int] = field(default_factory=list)  # their tokens, pass for pass
    batched_passes: int = 0  # passes shared with other requests (they cost more than alone)
    first_feed_new: int = 0  # tokens the first pass computed (an initial jump's included)


class TraceRecorder:
    """What one request writes while it decodes (steps, jumps, deduplicated masks, counters);
    `build` makes the typed `Trace` of it. One per `Sequence`."""

    def __init__(self) -> None:
        self.steps: list[StepRecord] = []
        self.jumps: list[JumpRecord] = []
        self.skips: list[JumpSkip] = []
        self.n_skips = 0
        self.masks: dict[str, str] = {}
        self.n = Counters()

    def add_step(self, step: StepRecord) -> StepRecord:
        self.steps.append(step)
        return step

    def add_jump(self, info: JumpRecord, step_index: int) -> None:
        """A jump, linked from the step whose token triggered it (-1: before the first step)."""
        info.step = step_index
        self.jumps.append(info)
        if step_index >= 0:
            self.steps[step_index].jump = len(self.jumps) - 1

    def add_skip(self, skip: JumpSkip) -> None:
        self.n_skips += 1
        if len(self.skips) < MAX_SKIPS_IN_TRACE:
            self.skips.append(skip)

    def add_mask(self, ids, vocab_size: int) -> str:
        """Store a mask once (compressed); returns the key steps refer to it by."""

        blob = encode_mask(ids, vocab_size)
        key = hashlib.sha1(blob.encode()).hexdigest()[:12]
        self.masks.setdefault(key, blob)
        return key

    def totals(
        self,
        *,
        prompt_tokens: int,
        output_tokens: int,
        jumped_tokens: int,
        wall_s: float,
        decode_s: float,
        compile_s: float,
        finished: bool,
        reason: str,
        queue_s: float,
        est_forward_ms: float = 0.0,
        est_masked_ms: float = 0.0,
        runtime: str = "",
        run_clock: RunClock | None = None,
    ) -> Totals:
        n, steps = self.n, self.steps
        n_steps = max(1, len(steps))
        clock = run_clock or RunClock()
        return Totals(
            forward_passes=n.forward_passes,
            output_tokens=output_tokens,
            prompt_tokens=prompt_tokens,
            prefilled_tokens=n.prefilled_tokens,
            steps=len(steps),
            model_steps=sum(1 for s in steps if s.origin == "model"),
            forced_steps=sum(1 for s in steps if s.origin == "forced"),
            jumped_tokens=jumped_tokens,
            jumps=len(self.jumps),
            jumped_chars=sum(len(j.string) for j in self.jumps),
            wall_s=round(wall_s, 4),
            decode_s=round(decode_s, 4),
            prefill_ms=n.prefill_ms or 0.0,
            prompt_cached_tokens=n.prompt_cached_tokens,
            forward_s=round(n.forward_s, 4),
            grammar_s=round(n.grammar_s, 5),
            grammar_us_per_step=round(n.grammar_s * 1e6 / n_steps, 1),
            sample_us_per_step=round(sum(s.sample_us for s in steps) / n_steps, 1),
            forward_ms_per_pass=round(n.forward_s * 1e3 / max(1, n.forward_passes), 3),
            tokens_per_s=round(output_tokens / wall_s, 2) if wall_s > 0 else None,
            compile_s=round(compile_s, 4),
            finished=finished,
            reason=reason,
            queue_s=round(queue_s, 4),
            jumps_skipped=self.n_skips,
            est_forward_ms=round(est_forward_ms, 3),
            est_masked_ms=round(est_masked_ms, 3),
            runtime=runtime,
            kv_held_passes=n.kv_held_passes,
            recomputed_tokens=n.recomputed_tokens,
            run_step_ms=round(clock.step_ms, 3),
            run_forward_ms=round(clock.forward_ms, 3),
            run_masked_ms=round(clock.masked_ms, 3),
            clock=clock.source,
            run_jump_passes=clock.jump_passes,
            run_jump_tokens=clock.jump_tokens,
            run_jump_in_steps=round(clock.jump_in_steps, 2),
            model_jump_in_steps=round(clock.model_jump_in_steps, 2),
        )

    def build(
        self,
        *,
        request: dict,
        model: dict,
        backend: str | None,
        mode: str,
        prompt_tokens: int,
        text: str,
        tokens: list[dict],
        totals: Totals,
        scheduler: dict,
        valid: bool | None,
        validation: str,
    ) -> Trace:
        return Trace(
            request=request,
            model=model,
            backend=backend,
            mode=mode,
            prompt_tokens=prompt_tokens,
            text=text,
            tokens=tokens,
            steps=self.steps,
            jumps=self.jumps,
            masks=self.masks,
            totals=totals,
            scheduler=scheduler,
            valid=valid,
            validation=validation,
            jump_skips=self.skips,
        )


def _upgrade_v1(obj: dict) -> dict:
    """Version 1 -> 2: fill the fields version 2 added with what they meant then."""
    obj = dict(obj)
    obj["scheduler"] = {"kind": "single", "max_batch": 1}
    obj.setdefault("valid", None)
    obj.setdefault("validation", "not recorded (a version 1 trace)")
    obj["steps"] = [{"batch_size": 1, **s} for s in obj["steps"]]
    obj["totals"] = {"queue_s": 0.0, **obj["totals"]}
    obj["version"] = 2
    return obj


def _upgrade_v2(obj: dict) -> dict:
    """Version 2 -> 3: no skipped jumps were recorded then."""
    obj = dict(obj)
    obj.setdefault("jump_skips", [])
    obj["totals"] = {"jumps_skipped": 0, **obj["totals"]}
    obj["version"] = 3
    return obj


def _upgrade_v3(obj: dict) -> dict:
    """Version 3 -> 4: a constraint held over the whole output, no segments."""
    obj = dict(obj)
    obj.setdefault("segments", [])
    obj["version"] = 4
    return obj


def _upgrade_v4(obj: dict) -> dict:
    """Version 4 -> 5: no trace was a replay."""
    return {**obj, "version": 5}


def _upgrade_v5(obj: dict) -> dict:
    """Version 5 -> 6: the backend was the one asked for (no `auto`)."""
    return {**obj, "backend_why": "", "version": 6}


def validate_trace(obj) -> dict:
    """Check that an uploaded/loaded object is a trace this version can show (and bring
    an older one up to this version)."""
    if isinstance(obj, (str, bytes)):
        try:
            obj = json.loads(obj)
        except json.JSONDecodeError as exc:
            raise CfsmError("invalid_input", f"trace is not valid JSON: {exc}") from exc
    if not isinstance(obj, dict):
        raise CfsmError("invalid_input", "a trace must be a JSON object")
    missing = [k for k in REQUIRED_KEYS if k not in obj]
    if missing:
        raise CfsmError("invalid_input", f"not a cfsm trace: missing {', '.join(missing)}")
    v = obj["version"]
    if not isinstance(v, int) or isinstance(v, bool) or v < 1:
        raise CfsmError("invalid_input", f"trace version {v!r} is not a version number")
    if v > TRACE_VERSION:
        raise CfsmError(
            "invalid_input", f"trace version {v!r} is newer than this app ({TRACE_VERSION})"
        )
    if not isinstance(obj["steps"], list) or not isinstance(obj["totals"], dict):
        raise CfsmError(
            "invalid_input", "not a cfsm trace: steps must be a list and totals an object"
        )
    for at, step in (
        (1, _upgrade_v1),
        (2, _upgrade_v2),
        (3, _upgrade_v3),
        (4, _upgrade_v4),
        (5, _upgrade_v5),
    ):
        if obj["version"] == at:
            obj = step(obj)
    return obj


def encode_mask(ids, vocab_size: int) -> str:
    """Allowed ids -> base64(zlib(packbits)): a 49k-token mask takes ~100 bytes-2 KB.
    viz.plots.decode_mask reads it back."""

    bits = np.zeros(vocab_size, dtype=bool)
    bits[np.asarray(ids, dtype=np.int64)] = True
    return base64.b64encode(zlib.compress(np.packbits(bits).tobytes(), 6)).decode("ascii")
