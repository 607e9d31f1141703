"""`cfsm bench --suite peers`: the systems a user would pick instead, side by side in one run.

Same weights (the embedded GGUF: dequantized for PyTorch, as it is for llama.cpp), same
prompts (chat template applied once, the same token ids for every system), greedy, the same
max_new_tokens, compact JSON:
- `outlines`: the outlines package's Generator over its transformers model;
- `transformers+xgrammar`: `model.generate` with xgrammar's HF logits processor;
- `transformers+llguidance`: `model.generate` with a logits processor over llguidance's
  matcher and its torch bitmask helpers;
- `llama-server sampler`: llama.cpp's grammar (GBNF, llama.cpp's JSON-schema rules) sampled
  the way llama-server samples (`common_sampler`: the grammar checks the sampled token and
  masks the whole vocabulary only on rejection), in-process on the GGUF (llamacpp_peer.py);
  also with llama.cpp's default optional whitespace (what `response_format` gets);
- `llama.cpp+grammar, full vocabulary`: the grammar applied to the whole vocabulary at every
  step (llama-cpp-python's `Llama` class);
- `llama-server (HTTP)`: the real server where scripts/build_llama_server.sh built it, given
  the compact grammar, and given the schema itself (its own converter);
- `cfsm masked` and `cfsm jump` on the default backend, on each runtime;
- `llama.cpp, no constraint`: a reference (its outputs are not expected to be valid), for
  the cost of masking on llama.cpp.
Each system compiles each task's constraint once, cold, before its timed runs (compile time
is reported apart); wall time is the sum over the task's prompts. Every llama.cpp row (cfsm's
too) keeps the previous prompt's common prefix, warm-up prompt included, as llama-server does
by default; the transformers rows reuse nothing. One-token steps on llama.cpp run on the
thread count measured fastest at the start (both counts are in the results); a prompt uses
every core. Every compact row is compared like with like; the rows with optional whitespace
write other (longer) outputs and are shown, not ranked."""

from __future__ import annotations

import importlib.util
import json
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial

from engine.backends import get_backend
from engine.constraint import Constraint
from engine.decoding.decoder import GenerateRequest
from engine.errors import CfsmError
from engine.lazy import lazy_module
from engine.regex.normalize import normalize_regex
from engine.runtimes.host_threads import cpu_pass_thread

from .compile_speed import compile_speed
from .decode import paper_items
from .llama_server import LlamaServer, server_binary
from .llamacpp_costs import LlamaCosts, limit_ms, measure_costs
from .llamacpp_grammar import regex_gbnf, schema_gbnf
from .llamacpp_peer import LlamaCppGrammarPeer
from .peers_report import format_table, ratio, summarize, write_peers_report
from .suite import Suite, names_flag, tokens_flag, with_engine

jsonschema = lazy_module("jsonschema")
torch = lazy_module("torch")
outlines = lazy_module("outlines")  # the `peers` extra
xgr = lazy_module("xgrammar")
llguidance = lazy_module("llguidance")
llg_hf = lazy_module("llguidance.hf")
llg_torch = lazy_module("llguidance.torch")

SYSTEMS = (
    "outlines",
    "transformers+xgrammar",
    "transformers+llguidance",
    "llama-server sampler",
    "llama-server sampler, optional whitespace",
    "llama.cpp+grammar, full vocabulary",
    "llama-server (HTTP), grammar",
    "llama-server (HTTP), json_schema",
    "cfsm masked (transformers)",
    "cfsm jump (transformers)",
    "cfsm masked (llama.cpp)",
    "cfsm jump (llama.cpp)",
    "llama.cpp, no constraint",
)
REFERENCE = "llama.cpp, no constraint"  # timed for comparison, not a constrained system
# in-process llama.cpp peers: (sampling, whitespace of the schema's grammar)
LLAMA_PEERS = {
    "llama-server sampler": ("server", "compact"),
    "llama-server sampler, optional whitespace": ("server", "llama.cpp default"),
    "llama.cpp+grammar, full vocabulary": ("full", "compact"),
    REFERENCE: ("server", "compact"),
}
HTTP_PEERS = ("llama-server (HTTP), grammar", "llama-server (HTTP), json_schema")
NOT_COMPACT = {"llama-server sampler, optional whitespace", "llama-server (HTTP), json_schema"}
CFSM_RUNTIMES = {"transformers": "transformers", "llama.cpp": "llamacpp"}

COMPACT_PERSON = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 24},
        "age": {"type": "integer", "minimum": 0, "maximum": 150},
        "city": {"type": "string", "maxLength": 24},
        "employed": {"type": "boolean"},
    },
    "required": ["name", "age", "city", "employed"],
    "additionalProperties": False,
}
ORDER = {
    "type": "object",
    "properties": {
        "orderId": {"type": "integer", "minimum": 1, "maximum": 99999},
        "status": {"type": "string", "enum": ["pending", "shipped", "delivered", "cancelled"]},
        "express": {"type": "boolean"},
        "items": {
            "type": "array",
            "minItems": 1,
            "maxItems": 3,
            "items": {"type": "string", "enum": ["book", "pen", "lamp", "chair", "mug"]},
        },
    },
    "required": ["orderId", "status", "express", "items"],
    "additionalProperties": False,
}


@dataclass
class Task:
    """One constraint and the prompts decoded under it."""

    name: str
    constraint: Constraint
    prompts: list[str]

    def valid(self, text: str) -> bool:
        if self.constraint.kind == "regex":
            return re.fullmatch(self.constraint.text, text) is not None

        try:
            jsonschema.validate(json.loads(text), json.loads(self.constraint.text))
            return True
        except (ValueError, jsonschema.ValidationError):
            return False


def default_tasks(names: int) -> list[Task]:
    regex, items = paper_items("character", names)
    who = [label for label, _ in items]
    return [
        Task("character (regex)", Constraint("regex", regex), [p for _, p in items]),
        Task(
            "person (compact object)",
            Constraint("schema", json.dumps(COMPACT_PERSON), "compact"),
            [
                f"Describe {n} from Harry Potter as JSON: name, age, city and whether employed."
                for n in who
            ],
        ),
        Task(
            "order (arrays and enums)",
            Constraint("schema", json.dumps(ORDER), "compact"),
            [
                f"Write a JSON order placed by {n}: an id, a status, express or not, and one to "
                "three items."
                for n in who
            ],
        ),
    ]


class PeerRunner:
    """Runs one task on one system; the model and tokenizers are shared.

    Every PyTorch and llama.cpp call of the peers runs on the process's pass thread, where
    cfsm's own passes run: from the main thread, which lives on, their OpenMP work started
    a second team beside the pass thread's, libgomp then slept at its barriers, and every
    2-thread pass of every row slowed down (cfsm jump, character task: 5.83 s against
    4.03 s). Each call is one prompt's generation, so Ctrl-C waits for that one only."""

    def __init__(self, engine, max_new_tokens: int) -> None:
        self.eng = engine
        self.hf = engine.ensure_model("transformers")
        self.lm = self.hf.lm  # the PyTorch model the transformers peers run
        self.max_new = max_new_tokens
        self._outlines_model = None
        self._xgr_info = None
        self._llg_tok = None
        self._llama = None
        self._server: LlamaServer | None = None
        self.costs: LlamaCosts | None = None
        self.limits: dict[str, float] = {}  # per task: cfsm jump's lower bound, summed
        # what this bench changes on the engine it is given, given back by close(): the
        # engine may be shared (tests, a server) and must not keep the bench's settings
        self._given_back: list[Callable[[], None]] = []
        for rt in CFSM_RUNTIMES.values():  # no cost re-measure inside a timed call
            dec = engine.ensure_model(rt)
            self._given_back.append(partial(setattr, dec, "remeasure_costs", dec.remeasure_costs))
            dec.remeasure_costs = False

    # ------------------------------------------------------------------ prompts
    def prompt_ids(self, prompt: str) -> list[int]:
        return self.hf.prompt_ids(prompt, raw=False)

    @property
    def llm(self):
        return self.eng.ensure_model("llamacpp").lm.model  # the loaded GGUF (LlamaModel)

    def measure(self) -> LlamaCosts:
        """The pass costs on llama.cpp, and both sides set to step on the faster thread
        count (cfsm's runner through llama_set_n_threads)."""
        llm = self.llm
        self.costs = cpu_pass_thread().call(measure_costs, llm, self.prompt_ids("Hi"))
        fixed = llm.pass_threads.fixed
        was = fixed.get("step")
        self._given_back.append(
            partial(fixed.pop, "step") if was is None else partial(fixed.__setitem__, "step", was)
        )
        fixed["step"] = self.costs.best_threads
        return self.costs

    def llama_peer(self) -> LlamaCppGrammarPeer:
        if self._llama is None:
            best = self.costs.best_threads if self.costs else None
            make = partial(LlamaCppGrammarPeer, self.llm, step_threads=best)
            self._llama = cpu_pass_thread().call(make)
        return self._llama

    def llama_server(self) -> LlamaServer | None:
        """The real llama-server where it is built (None: its rows are left out)."""
        if self._server is None and (binary := server_binary()) is not None:
            best = self.costs.best_threads if self.costs else self.llm.threads
            self._server = LlamaServer(binary, self.llm.path, best, self.llm.threads)
        return self._server

    def close(self) -> None:
        """Stops the peers' processes and gives the engine its own settings back."""
        while self._given_back:
            self._given_back.pop()()
        if self._llama is not None:
            cpu_pass_thread().call(self._llama.close)
        if self._server is not None:
            self._server.close()

    def _hf_generate(self, ids: list[int], processor, max_new: int) -> tuple[str, int]:
        """(text, output tokens without the final EOS, as cfsm counts them)."""

        x = torch.tensor([ids], device=self.lm.device)
        out = self.lm.model.generate(
            input_ids=x,
            attention_mask=torch.ones_like(x),
            max_new_tokens=max_new,
            do_sample=False,
            logits_processor=[processor],
            pad_token_id=self.eng.ctx.eos_token_id,
        )
        new = out[0, len(ids) :].tolist()
        if new and new[-1] == self.eng.ctx.eos_token_id:
            new = new[:-1]
        return self.lm.tokenizer.decode(new, skip_special_tokens=True), len(new)

    # ------------------------------------------------------------------ systems
    def compile(self, system: str, task: Task):
        """A compiled form of the task's constraint for this system (timed by the caller)."""
        c = task.constraint
        rx = (
            normalize_regex(c.text) if c.kind == "regex" else c.text
        )  # the language every adapter hands over
        if system == "outlines":
            if self._outlines_model is None:
                self._outlines_model = outlines.from_transformers(self.lm.model, self.lm.tokenizer)
            out_type = (
                outlines.types.Regex(rx)
                if c.kind == "regex"
                else outlines.types.JsonSchema(c.text, whitespace_pattern="")
            )
            return outlines.Generator(self._outlines_model, out_type)
        if system == "transformers+xgrammar":
            if self._xgr_info is None:
                self._xgr_info = xgr.TokenizerInfo.from_huggingface(
                    self.lm.tokenizer, vocab_size=self.lm.vocab_size
                )
            comp = xgr.GrammarCompiler(self._xgr_info, cache_enabled=False)
            if c.kind == "regex":
                return comp.compile_regex(rx)
            return comp.compile_json_schema(
                c.text, any_whitespace=False, separators=(",", ":"), strict_mode=True
            )
        if system == "transformers+llguidance":
            if self._llg_tok is None:
                self._llg_tok = llg_hf.from_tokenizer(
                    self.lm.tokenizer,
                    n_vocab=self.lm.vocab_size,
                    eos_token=self.eng.ctx.eos_token_id,
                )
            grammar = (
                llguidance.LLMatcher.grammar_from_regex(rx)
                if c.kind == "regex"
                else llguidance.LLMatcher.grammar_from_json_schema(
                    json.loads(c.text),
                    overrides={
                        "item_separator": ",",
                        "key_separator": ":",
                        "whitespace_flexible": False,
                    },
                )
            )
            llguidance.LLMatcher(
                self._llg_tok, grammar
            )  # parses and checks the grammar; each run makes its own matcher
            return grammar
        if system in LLAMA_PEERS or system in HTTP_PEERS:
            if system == REFERENCE:
                return None
            if c.kind == "regex":
                return regex_gbnf(rx)
            if system == HTTP_PEERS[1]:
                return json.loads(c.text)  # the server converts it itself
            return schema_gbnf(json.loads(c.text), LLAMA_PEERS.get(system, ("", "compact"))[1])
        return get_backend("fsm").compile(c, self.eng.ctx)  # cold: no cache; the lab's own

    def warm(self, system: str, compiled, task: Task) -> None:
        """Untimed, for every system alike: a short run of the compiled constraint, so that
        first-use costs (kernel compilation in the mask helpers, cfsm's compile cache, lazy
        state indexing of the first states) stay out of the timed runs."""
        if system.startswith("cfsm"):
            self.eng.compile(task.constraint, GenerateRequest.backend)
        self.generate(system, compiled, task, task.prompts[0], max_new=4)

    def warm_model(self) -> None:
        """Untimed first passes through every decoding path (HF generate and the engine on
        each runtime)."""

        x = torch.tensor([self.prompt_ids("Hi")], device=self.lm.device)
        hf = partial(
            self.lm.model.generate,
            input_ids=x,
            attention_mask=torch.ones_like(x),
            max_new_tokens=4,
            do_sample=False,
            pad_token_id=self.eng.ctx.eos_token_id,
        )
        cpu_pass_thread().call(hf)
        for rt in CFSM_RUNTIMES.values():
            self.eng.generate(
                GenerateRequest(
                    prompt="Hi", mode="free", max_new_tokens=4, trace_detail=False, runtime=rt
                )
            )

    def generate(
        self, system: str, compiled, task: Task, prompt: str, max_new: int | None = None
    ) -> tuple[str, int]:
        """(output text, output tokens) for one prompt; `prefill_s` is then its prompt's
        first pass where the system says (cfsm, llama.cpp), else None. A peer runs on the
        pass thread; cfsm's engine puts its own passes there."""
        if system.startswith("cfsm"):
            return self._generate(system, compiled, task, prompt, max_new)
        return cpu_pass_thread().call(self._generate, system, compiled, task, prompt, max_new)

    def _generate(
        self, system: str, compiled, task: Task, prompt: str, max_new: int | None
    ) -> tuple[str, int]:
        max_new = max_new or self.max_new
        self.prefill_s = None
        ids = self.prompt_ids(prompt)
        if system == "outlines":
            text_prompt = self.lm.tokenizer.decode(ids)
            if self.lm.tokenizer.encode(text_prompt) != ids:  # outlines encodes the text itself
                raise CfsmError(
                    "invalid_input",
                    "outlines would not see the same prompt tokens as the other systems",
                )
            text = compiled(text_prompt, max_new_tokens=max_new, do_sample=False)
            return text, len(self.lm.tokenizer.encode(text, add_special_tokens=False))
        if system == "transformers+xgrammar":
            return self._hf_generate(ids, xgr.contrib.hf.LogitsProcessor(compiled), max_new)
        if system == "transformers+llguidance":
            return self._hf_generate(
                ids, LlguidanceProcessor(self._llg_tok, compiled, self.lm.vocab_size), max_new
            )
        if system in LLAMA_PEERS:
            peer = self.llama_peer()
            out = peer.generate(ids, compiled, max_new, LLAMA_PEERS[system][0])
            self.prefill_s = peer.prefill_s
            return self.lm.tokenizer.decode(out, skip_special_tokens=True), len(out)
        if system in HTTP_PEERS:
            key = "grammar" if isinstance(compiled, str) else "json_schema"
            res = self.llama_server().complete(ids, max_new, **{key: compiled})
            self.prefill_s = res["timings"]["prompt_ms"] / 1e3
            # its count includes a sampled end-of-generation token; the others' does not
            return res["content"], int(res["tokens_predicted"]) - (res.get("stop_type") == "eos")
        mode, rt = system.split()[1], system.split("(")[1].rstrip(")")
        tr = self.eng.generate(
            GenerateRequest(
                prompt=prompt,
                constraint=task.constraint,
                mode=mode,
                max_new_tokens=max_new,
                trace_detail=False,
                runtime=CFSM_RUNTIMES[rt],
            )
        ).to_json()
        self.prefill_s = tr["totals"]["prefill_ms"] / 1e3
        if system == "cfsm jump (llama.cpp)" and self.costs and max_new == self.max_new:
            self.limits[task.name] = self.limits.get(task.name, 0.0) + limit_ms(tr, self.costs)
        return tr["text"], tr["totals"]["output_tokens"]


class LlguidanceProcessor:
    """A transformers logits processor over an llguidance matcher (its torch helpers fill
    and apply the bitmask); one per generate() call."""

    def __init__(self, tokenizer, grammar: str, vocab_size: int) -> None:

        self.m = llguidance.LLMatcher(tokenizer, grammar)
        self.mask = llg_torch.allocate_token_bitmask(1, vocab_size)
        self.started = False

    def __call__(self, input_ids, scores):

        if self.started and not self.m.consume_token(int(input_ids[0, -1])):
            raise CfsmError(
                "dead_end", f"llguidance rejected a token it had allowed: {self.m.get_error()}"
            )
        self.started = True
        llg_torch.fill_next_token_bitmask(self.m, self.mask, 0)
        llg_torch.apply_token_bitmask_inplace(scores, self.mask.to(scores.device))
        return scores


def run_peers(
    engine,
    tasks: list[Task],
    max_new_tokens: int = 256,
    systems=SYSTEMS,
    log: Callable[[str], None] = print,
) -> dict:
    runner = PeerRunner(engine, max_new_tokens)
    try:  # the engine gets its settings back however the bench ends
        costs = runner.measure()
        log(
            f"llama.cpp one-token step by threads {costs.step_ms} ms: both sides step on "
            f"{costs.best_threads}; a {costs.chunk_ms} ms pass of 16 tokens"
        )
        if any(s in HTTP_PEERS for s in systems):
            try:
                server = runner.llama_server()
                why = "is not built (scripts/build_llama_server.sh)"
            except RuntimeError as exc:  # it exited or was not ready at start
                server, why = None, f"did not start ({exc})"
            if server is None:
                systems = [s for s in systems if s not in HTTP_PEERS]
                log(f"llama-server {why}: its rows are left out")
        runner.warm_model()
        rows = []
        for task in tasks:
            for system in systems:
                if task.constraint.kind == "regex" and system in NOT_COMPACT:
                    continue  # a regex has no JSON whitespace: the same grammar as its compact row
                t0 = time.perf_counter()
                compiled = runner.compile(system, task)
                compile_s = time.perf_counter() - t0
                runner.warm(system, compiled, task)
                wall, tokens, valid, texts, prefill = 0.0, 0, 0, [], 0.0
                for prompt in task.prompts:
                    t = time.perf_counter()
                    text, n = runner.generate(system, compiled, task, prompt)
                    wall += time.perf_counter() - t
                    prefill = (
                        None
                        if runner.prefill_s is None or prefill is None
                        else (prefill + runner.prefill_s)
                    )
                    tokens += n
                    valid += task.valid(text)
                    texts.append(text)
                chars = sum(len(t) for t in texts)
                row = {
                    "system": system,
                    "task": task.name,
                    "wall_s": round(wall, 3),
                    "output_tokens": tokens,
                    "output_chars": chars,
                    "tokens_per_s": round(tokens / max(wall, 1e-9), 1),
                    "ms_per_char": round(1e3 * wall / max(chars, 1), 2),
                    "compile_s": round(compile_s, 4),
                    # decoding after each prompt's first pass, per output token (where known)
                    "decode_ms_per_token": None
                    if prefill is None
                    else round(1e3 * (wall - prefill) / max(tokens, 1), 2),
                    "valid": valid,
                    "runs": len(task.prompts),
                    "like_for_like": system not in NOT_COMPACT,
                    "prefix_reuse": system in LLAMA_PEERS
                    or system in HTTP_PEERS
                    or system.endswith("(llama.cpp)"),
                    "sample": texts[0][:200] if texts else "",
                    "texts": texts,
                }
                rows.append(row)
                log(
                    f"{task.name:26s} {system:24s} wall {wall:7.2f} s  tokens {tokens:5d}  compile "
                    f"{compile_s * 1e3:8.1f} ms  valid {valid}/{len(task.prompts)}"
                )
        speed = (
            compile_speed(engine, tasks[0].constraint.text)
            if tasks and tasks[0].constraint.kind == "regex"
            else None
        )
    finally:
        runner.close()
    for task, ms in runner.limits.items():
        jump = next(r for r in rows if r["task"] == task and r["system"] == "cfsm jump (llama.cpp)")
        jump["limit_s"] = round(ms / 1e3, 4)  # the ratio is the one of the figures shown
        jump["jump_vs_limit"] = ratio(jump["wall_s"], jump["limit_s"])
    return {
        "suite": "peers",
        "max_new_tokens": max_new_tokens,
        "model": engine.decoder.model_info(),
        "runtimes": {rt: engine.ensure_model(rt).model_info() for rt in CFSM_RUNTIMES.values()},
        "llama_cpp_costs": costs.to_json(),
        "llama_server": str(server_binary() or ""),
        "prefix_reuse": "every llama.cpp row (cfsm's and the peers') keeps the previous "
        "prompt's common prefix, as llama-server does; the transformers rows reuse nothing",
        "rows": rows,
        "summary": summarize(rows, REFERENCE),
        "compile": speed,
    }


def _run(args, log) -> dict:
    if importlib.util.find_spec("outlines") is None:
        raise CfsmError(
            "invalid_input",
            "the peers benchmark needs the `peers` extra: pip install -e '.[peers]'",
        )
    tasks = default_tasks(args.names)
    return with_engine(args, lambda eng: run_peers(eng, tasks, args.max_new_tokens, log=log))


SUITE = Suite(
    "peers",
    "outlines, transformers+xgrammar/llguidance, llama.cpp+grammar and cfsm masked and jump "
    "on both runtimes, side by side",
    _run,
    format_table,
    (names_flag(5), tokens_flag()),
    report=write_peers_report,
)
