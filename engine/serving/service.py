"""The engine as one object: model, decoder and compile cache, shared by the CLI, the
benchmark and the app."""

from __future__ import annotations

import copy
import dataclasses
import functools
import time

from ..analysis.doctor import diagnose
from ..analysis.ideal import ideal_counts
from ..analysis.unbounded import unfinished_line, why_unfinished
from ..backends import AUTO, DEFAULT_BACKEND, TokenizerContext, get_backend
from ..backends.audit import audit
from ..constraint import Constraint
from ..decoding.decoder import Decoder, GenerateRequest
from ..decoding.model import load_model, load_tokenizer, resolve_runtime, runtime_note
from ..decoding.trace import Trace
from ..errors import CfsmError
from ..limits import MAX_NEW_TOKENS
from ..regex.compressed import compressed_of
from ..regex.dfa import DEFAULT_MAX_STATES, CharDFA
from ..replay.ids import IdResolver
from ..replay.tokens import from_response
from ..replay.walk import ReplayWalk, replay_trace
from ..schema.places import places_for_view
from ..triggers.matcher import TriggeredConstraint
from ..triggers.native import NativeTriggeredConstraint
from ..triggers.plan import build_plan
from .compile_cache import DEFAULT_COMPILE_TIMEOUT_S, CompileCache, CompileResult, LiveAutomaton

MAX_AUTOMATON_EDGES_IN_TRACE = 40_000


def automaton_json(dfa: CharDFA) -> dict:
    """The DFA and its compressed view, as the trace and `cfsm compile` carry it (built
    once per automaton; callers get a shallow copy they may extend)."""
    if dfa.view is not None:
        return dict(dfa.view)
    cfsm = compressed_of(dfa)
    data = dfa.to_json()
    if len(data["transitions"]) > MAX_AUTOMATON_EDGES_IN_TRACE:
        data["transitions"] = data["transitions"][:MAX_AUTOMATON_EDGES_IN_TRACE]
        data["truncated"] = True
    data["chains"] = [c.to_json() for c in cfsm.chains]
    data["jumpable_states"] = cfsm.jumpable_states
    data["jump_strings"] = {str(s): cfsm.jump_string(s) for s in cfsm.jumpable_states}
    data["stats"] = cfsm.stats()
    dfa.view = data
    return dict(data)


class Engine:
    """Loads the model lazily; compiling needs only the tokenizer."""

    def __init__(
        self,
        model: str | None = None,
        device: str | None = None,
        trust_remote_code: bool = False,
        max_states: int = DEFAULT_MAX_STATES,
        compile_timeout_s: float = DEFAULT_COMPILE_TIMEOUT_S,
        load_weights: bool = True,
        continuous: bool = False,
        runtime: str | None = None,
    ) -> None:
        self.model_name = model
        self.continuous = continuous
        self.device = device
        self.trust_remote_code = trust_remote_code
        self.runtime = resolve_runtime(runtime, model, device)  # the default for requests
        # auto's choice, when llama.cpp would have run this model but cannot here
        self.runtime_note = runtime_note(self.runtime, model, device)
        self.lm = None
        self.decoder: Decoder | None = None
        self.decoders: dict[str, Decoder] = {}
        self.ctx: TokenizerContext | None = None  # the first decoder's, or the tokenizer's
        if load_weights:
            self.decoder = self.ensure_model()
            ctx = self.decoder.ctx
        else:
            tok, vocab = load_tokenizer(model, trust_remote_code)
            ctx = TokenizerContext(tok, vocab)
        self.ctx = ctx
        # workers are set up on first use (outside the compile's limit); setting them up in
        # the background at start competed with the first requests on 2 cores
        self.cache = CompileCache(ctx, max_states=max_states, timeout_s=compile_timeout_s)

    def ensure_model(self, runtime: str | None = None) -> Decoder:
        """The decoder of `runtime` (the engine's default when empty), loaded on first use;
        every runtime shares one tokenizer context, so compiled constraints serve all."""
        rt = self.runtime if not runtime or runtime == "auto" else runtime
        if rt not in self.decoders:
            lm = load_model(self.model_name, self.device, self.trust_remote_code, rt)
            ctx = self.ctx
            if ctx is not None and ctx.vocab_size != lm.vocab_size:
                raise CfsmError(
                    "unsupported_model",
                    f"the {rt} runtime's vocabulary ({lm.vocab_size}) differs from the "
                    f"tokenizer's ({ctx.vocab_size})",
                )
            if rt == self.runtime:
                lm.runtime_note = self.runtime_note
            self.decoders[rt] = Decoder(lm, ctx)
        if rt == self.runtime:
            self.decoder = self.decoders[rt]
            self.lm = self.decoder.lm
        return self.decoders[rt]

    def compile(self, constraint: Constraint, backend: str = DEFAULT_BACKEND) -> CompileResult:
        return self.cache.get(constraint, backend)

    def automaton(self, constraint: Constraint) -> CharDFA:
        """The character DFA of a regex or schema (cached; built in the killable worker)."""
        return self.cache.dfa(constraint)

    def try_automaton(self, constraint: Constraint) -> LiveAutomaton:
        """The automaton within a check-while-typing budget, or why not (compile_cache)."""
        return self.cache.try_dfa(constraint)

    def diagnose(
        self,
        constraint: Constraint,
        prompt: str | None = None,
        samples: int = 8,
        max_new_tokens: int = 256,
        seed: int = 0,
        threshold: int = 1,
        documents: list | None = None,
    ) -> dict:
        """The doctor's report (`cfsm doctor`, the Doctor tab). With a prompt, the model
        writes the samples (greedy first, then sampled at 0.8, jump mode, default backend);
        without one, or when none finishes, they are synthesized from the automaton.
        `documents`: the user's own, which each what-if says whether it rejects."""

        outputs = None
        if prompt is not None:
            outputs = []
            for i in range(int(samples)):
                req = GenerateRequest.from_inputs(
                    prompt,
                    constraint,
                    mode="jump",
                    seed=i,
                    temperature=0.0 if i == 0 else 0.8,
                    max_new_tokens=max_new_tokens,
                    trace_detail=False,
                )
                tr = self.generate(req)
                if tr.totals.finished:
                    outputs.append(tr.text)
        costs = None
        if self.decoder is not None and self.decoder.runner.costs is not None:
            costs = {**self.decoder.runner.costs.to_json(), "runtime": self.decoder.runner.name}
        t0 = time.monotonic()
        dfa = self.automaton(constraint)
        rep = diagnose(
            constraint,
            self.ctx.continuation,
            self.ctx.vocab.token_bytes,
            samples=outputs,
            n=int(samples),
            seed=seed,
            threshold=threshold,
            dfa=dfa,
            costs=costs,
            # the changed schemas' automata: in the workers, within what the compile
            # limit leaves after this one's
            automaton=lambda c, seconds: self.cache.dfa(c, timeout_s=seconds),
            what_if_s=max(0.0, self.cache.timeout_s - (time.monotonic() - t0)),
            instances=documents,
        )
        rep.runtime_note = self.runtime_note
        return rep.to_json()

    def compile_report(self, constraint: Constraint, backend: str = DEFAULT_BACKEND) -> dict:
        res = self.compile(constraint, backend)
        out: dict = {
            "constraint": {
                "kind": constraint.kind,
                "whitespace": constraint.whitespace,
                "lenient": constraint.lenient,
                "spec": constraint.spec,
            },
            "backend": res.backend or backend,
            **({"backend_why": res.why} if res.why else {}),
            "compile_seconds": round(res.seconds, 4),
            "backend_stats": res.compiled.stats(),
            "warnings": list(res.compiled.warnings) + list(self.ctx.vocab.warnings),
            # what this process's compile cache holds now, against its budget
            "cache": self.cache.stats(),
        }
        if constraint.kind == "schema" and res.dfa is not None:
            out["regex"] = constraint.regex()
        if res.dfa is not None:
            out.update(automaton_json(res.dfa))
        elif res.dfa_error:
            out["automaton_error"] = res.dfa_error
        return out

    def generate(self, req: GenerateRequest, on_event=None, should_stop=None) -> Trace:
        """Compile (outside any decoding), decode, and return the trace (`.to_json()` is the
        file, the page's download and the API's `cfsm` object). With `continuous=True` the
        request joins the running batch that other callers share."""
        dec = self.ensure_model(req.runtime)
        res, compiled, cached = None, None, False
        if req.mode != "free":
            res, compiled, cached = self.compile_request(req)
        on_event = self._live_listener(on_event, req, res, compiled)
        if self.continuous:
            trace = dec.submit(req, compiled, on_event=on_event, should_stop=should_stop)
        else:
            trace = dec.run(req, compiled, on_event=on_event, should_stop=should_stop)
        if res is not None:
            if compiled.triggered:
                self._annotate_segments(trace, res, compiled)
            else:
                self._annotate(trace, req, res)
            trace.totals.compile_cached = cached
        return trace

    def side_by_side(self, a: GenerateRequest, b: GenerateRequest) -> tuple[Trace, Trace]:
        """A, then B, each from the same cache state: each computes its whole prompt,
        sharing no kept prompt (else B reuses the prompt A just prefilled and looks many
        times faster; and priming each side's prompt first did not hold on a busy server:
        another user's request kept its own prompt, and the sides shared 8, 24 or 53 of
        their 53 prompt tokens). What Compare and `cfsm bench compare` run."""
        cold = [dataclasses.replace(r, cold_prompt=True) for r in (a, b)]
        return self.generate(cold[0]), self.generate(cold[1])

    def compile_request(self, req: GenerateRequest):
        """(the first constraint's compile, what the decoder runs, whether all was cached):
        a triggered request compiles its plan as one grammar where the backend finds
        triggers itself, else each of its plan's constraints, run behind one matcher
        (engine.triggers)."""

        plan, native = self._plan(req)
        targets = self._targets(req, plan, native)
        cached = all(self.cache.has(c, req.backend) for c in targets)
        results = [self.compile(c, req.backend) for c in targets]
        if plan is None:
            return results[0], results[0].compiled, cached
        if native is not None:
            how = f"native ({results[0].backend or req.backend})"
            return results[0], NativeTriggeredConstraint(plan, results[0].compiled, how), cached
        compiled = TriggeredConstraint(plan, [r.compiled for r in results], self.ctx)
        return results[0], compiled, cached

    def compile_targets(self, req: GenerateRequest) -> list[Constraint]:
        """What a run compiles (the page shows each one's progress): its constraint; a
        triggered run's one native grammar, or its plan's constraints."""
        if req.mode == "free":
            return []
        return self._targets(req, *self._plan(req))

    @staticmethod
    def _targets(req: GenerateRequest, plan, native) -> list[Constraint]:
        if plan is None:
            if req.constraint is None:
                raise CfsmError("invalid_input", f"mode {req.mode!r} needs a constraint")
            return [req.constraint]
        return [native] if native is not None else list(plan.constraints)

    def _plan(self, req: GenerateRequest):
        """(plan, the backend's own grammar for it or None); (None, None) untriggered. The
        native grammar is asked for unless the request wants the engine's layer; each
        segment's constraint is audited first, so a known gap is refused on either path."""

        opts = req.trigger_options()
        if not opts.active:
            return None, None
        plan = build_plan(opts, req.constraint)
        if req.backend == AUTO and req.trigger_impl != "native":
            return plan, None  # the engine's layer; each segment's backend chosen by auto
        backend = get_backend(req.backend if req.backend != AUTO else "xgrammar")
        native = None
        if req.trigger_impl != "engine":
            native = backend.triggered_grammar(plan, opts, self.ctx)
        if native is None and req.trigger_impl == "native":
            raise CfsmError(
                "unsupported_feature",
                f"backend {req.backend!r} has no trigger machinery of its own for this "
                "request (use trigger_impl engine or auto)",
            )
        if native is not None:
            for c in plan.constraints:
                audit(backend, c)
        return plan, native

    def _annotate_compile(self, trace: Trace, res: CompileResult, compiled, why: str = "") -> None:
        """What every constrained run's trace says of its compile: the time, the backend
        (auto's choice, not "auto") and why, the compiled form's stats and warnings."""
        trace.totals.compile_s = round(res.seconds, 4)
        trace.backend, trace.backend_why = res.backend or trace.backend, res.why + why
        trace.compile = compiled.stats()
        trace.warnings = list(compiled.warnings) + list(self.ctx.vocab.warnings)

    def _annotate(self, trace: Trace, req: GenerateRequest, res: CompileResult) -> None:
        """What the compile adds to a trace: its stats, the automaton with the path the
        output took, and the ideal forward-pass count of the output."""
        self._annotate_compile(trace, res, res.compiled)
        if trace.totals.reason == "max_new_tokens":
            u = why_unfinished(req.constraint, trace.text)
            trace.unfinished = u and {**u, "line": unfinished_line(u)}
        if req.constraint is not None and req.constraint.kind == "schema" and res.dfa is not None:
            trace.regex = req.constraint.regex()
        if res.dfa is None:
            return
        self._draw_automaton(trace, req.constraint, res.dfa)
        dec = self.ensure_model(req.runtime)
        canon = self.ctx.continuation.encode(trace.text)
        ideal = ideal_counts(compressed_of(res.dfa), trace.text, canon, dec.vocab.token_bytes)
        if ideal is not None:
            # one pass per decision the model makes (the prompt's pass gives the first); the
            # stop is among them only where the automaton could go on (ideal_counts)
            ideal["ideal_forward_passes"] = ideal["model_tokens"]
            ideal["emitted_tokens"] = len(trace.tokens)
        trace.ideal = ideal

    def _live_listener(self, on_event, req: GenerateRequest, res, compiled):
        """`on_event` with each step's `snapshot` turned into the trace so far, a copy of its
        own (decoding goes on changing the run's records), its automaton drawn as the
        finished trace's will be (built once per run, in the first snapshot asked for; a
        triggered run's live view has no automaton)."""
        if on_event is None:
            return None
        dfa = None if res is None or getattr(compiled, "triggered", False) else res.dfa
        drawn: dict = {}

        def live_trace(snapshot) -> Trace:
            trace = copy.deepcopy(snapshot())
            if dfa is not None:
                if not drawn:
                    drawn.update(self._automaton_view(req.constraint, dfa))
                trace.automaton = {**drawn, "path": dfa.path(trace.text)}
            return trace

        def listen(kind: str, data) -> None:
            if kind == "step" and data.snapshot is not None:
                data.snapshot = functools.partial(live_trace, data.snapshot)
            on_event(kind, data)

        return listen

    @staticmethod
    def _automaton_view(constraint: Constraint | None, dfa: CharDFA) -> dict:
        """The automaton as the step view draws it (and each state's place in a schema)."""
        view = automaton_json(dfa)
        if constraint is not None and constraint.kind == "schema":
            view["places"] = places_for_view(dfa, constraint.text)
        return view

    @classmethod
    def _draw_automaton(cls, trace: Trace, constraint: Constraint | None, dfa: CharDFA) -> None:
        """The automaton the step view draws, with the path the output took."""
        trace.automaton = {**cls._automaton_view(constraint, dfa), "path": dfa.path(trace.text)}

    def replay(self, constraint: Constraint, response, meta: dict,
               backend: str = DEFAULT_BACKEND) -> Trace:  # fmt: skip
        """Another engine's response (with its logprobs) walked through this constraint's
        automaton and masks: a trace of mode "replay" (engine.replay). `meta`: endpoint,
        model, prompt, source. Needs the tokenizer only."""
        res = self.compile(constraint, backend)
        tokens, message = from_response(response)
        if len(tokens) > MAX_NEW_TOKENS:
            msg = f"{len(tokens)} tokens to replay; the limit is {MAX_NEW_TOKENS}"
            raise CfsmError("input_too_large", msg)
        ids_of = IdResolver(self.ctx)
        tokens, ids, text, how = ids_of.resolve(tokens, message)
        walk = ReplayWalk(constraint, res.compiled, res.dfa, self.ctx)
        trace = replay_trace(walk, tokens, ids, text, ids_of, {**meta, "ids_from": how})
        if message and message != text:  # the engine's parser changed its tokens' text
            trace.replay["message"] = message
        trace.backend, trace.backend_why = res.backend or backend, res.why
        trace.compile = res.compiled.stats()
        if constraint.kind == "schema" and res.dfa is not None:
            trace.regex = constraint.regex()
        if res.dfa is not None:
            self._draw_automaton(trace, constraint, res.dfa)
        return trace

    def _annotate_segments(self, trace: Trace, res: CompileResult, compiled) -> None:
        """A triggered run: who found the triggers and every segment's warnings, and the
        automaton of its first constraint, walked over the first segment held to it
        (`path_offset` says where that segment starts in the output)."""
        self._annotate_compile(trace, res, compiled, self._also(compiled, res.backend))
        seg = next((s for s in trace.segments if s["kind"] == "constrained"), None)
        if res.dfa is None:
            return
        trace.automaton = automaton_json(res.dfa)
        trace.automaton["path"] = res.dfa.path(seg["text"] if seg is not None else "")
        trace.automaton["path_offset"] = seg["char_start"] if seg is not None else 0
        trace.automaton["path_segment"] = seg["index"] if seg is not None else None

    @staticmethod
    def _also(compiled, first: str | None) -> str:
        """A triggered run's other constraints where auto chose them another backend."""
        others = {c.backend for c in getattr(compiled, "compiled", [])[1:]} - {first}
        return f"; other constraints on {', '.join(sorted(others))}" if others else ""

    def close(self) -> None:
        for dec in self.decoders.values():
            dec.close()
        self.cache.close()
