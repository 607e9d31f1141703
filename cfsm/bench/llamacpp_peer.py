"""The llama.cpp peer of `cfsm bench --suite peers`: what a llama.cpp user runs (the engine
of Ollama and llama-server), on the same GGUF and the same prompt ids.

A grammar sampler (GBNF) in a greedy sampler chain, applied to the whole vocabulary at
every step, no jump-forward. The GBNF of a regex task is xgrammar's printout of the regex
(the same language the other adapters get); a schema task goes through the bindings' own
JSON-schema converter (`llama_cpp_py_sync.constraints`), which refuses keywords it cannot
express: those are dropped first and listed in the row (its output is validated against
the full schema like every row). Like llama.cpp's `Llama` class, it keeps the previous
prompt's common prefix in its cache; the report says so.
"""

from __future__ import annotations

import json
import re
import time

RULE_NAME = re.compile(r"\broot(?:_\d+)+\b")
REPEAT_SPACE = re.compile(r"\{(\d+), ?(\d*)\}")
UNSUPPORTED = re.compile(r"constraint\(s\) for llama\.cpp GBNF: (.+)$")


def regex_gbnf(regex: str) -> str:
    """A GBNF grammar for `regex` (already normalized), printed by xgrammar, in llama.cpp's
    spelling: rule names without underscores (`root_1` -> `root-1`; its printout splits
    literals into one-character strings, so no name can occur inside one) and repeat counts
    without the space (`{1, 16}` -> `{1,16}`)."""
    import xgrammar as xgr

    text = RULE_NAME.sub(lambda m: m.group(0).replace("_", "-"), str(xgr.Grammar.from_regex(regex)))
    return REPEAT_SPACE.sub(r"{\1,\2}", text)


def schema_gbnf(schema: dict) -> tuple[str, list[str]]:
    """(GBNF, keywords dropped because the converter refuses them)."""
    from llama_cpp_py_sync.constraints import response_format_to_grammar

    dropped: list[str] = []
    doc = json.loads(json.dumps(schema))
    for _ in range(10):
        try:
            fmt = {"type": "json_schema", "json_schema": {"name": "task", "schema": doc}}
            return response_format_to_grammar(fmt), dropped
        except ValueError as exc:
            m = UNSUPPORTED.search(str(exc))
            if not m:
                raise
            keys = [k.strip() for k in m.group(1).split(",")]
            dropped += keys
            doc = _without(doc, set(keys))
    raise ValueError("the JSON-schema converter kept refusing the schema")


def _without(node, keys: set[str]):
    if isinstance(node, dict):
        return {k: _without(v, keys) for k, v in node.items() if k not in keys}
    if isinstance(node, list):
        return [_without(v, keys) for v in node]
    return node


class LlamaCppGrammarPeer:
    """Its own llama.cpp context on the engine's loaded GGUF model, llama.cpp's default
    context settings (flash attention as llama.cpp picks it), one sequence."""

    def __init__(self, llm, n_ctx: int = 4096) -> None:
        self.llm = llm  # engine.runtimes.llamacpp_runner.LlamaModel
        lib, ffi = llm.lib, llm.ffi
        cp = lib.llama_context_default_params()
        cp.n_ctx, cp.n_batch, cp.n_seq_max = n_ctx, 512, 1
        cp.n_threads = cp.n_threads_batch = llm.threads
        self.ctx = lib.llama_init_from_model(llm.model, cp)
        if self.ctx == ffi.NULL:
            raise RuntimeError("llama.cpp could not create the peer's context")
        self.mem = lib.llama_get_memory(self.ctx)
        self.batch = lib.llama_batch_init(512, 0, 1)
        self.cached: list[int] = []
        self.prefill_s = 0.0  # the last generate()'s prompt evaluation

    def close(self) -> None:
        self.llm.lib.llama_batch_free(self.batch)
        self.llm.lib.llama_free(self.ctx)

    def _eval(self, ids: list[int], start: int) -> None:
        lib, b = self.llm.lib, self.batch
        for off in range(0, len(ids), 512):
            chunk = ids[off : off + 512]
            b.n_tokens = len(chunk)
            for i, t in enumerate(chunk):
                b.token[i], b.pos[i], b.n_seq_id[i] = t, start + off + i, 1
                b.seq_id[i][0] = 0
                b.logits[i] = 1 if off + i == len(ids) - 1 else 0
            if lib.llama_decode(self.ctx, b) != 0:
                raise RuntimeError("llama_decode failed in the llama.cpp peer")

    def _prefill(self, ids: list[int]) -> None:
        """The prompt on top of the previous prompt's common prefix (at least one token is
        evaluated, for fresh logits)."""
        keep = 0
        while keep < min(len(ids) - 1, len(self.cached)) and ids[keep] == self.cached[keep]:
            keep += 1
        self.llm.lib.llama_memory_seq_rm(self.mem, 0, keep, -1)
        self._eval(ids[keep:], keep)
        self.cached = list(ids)

    def generate(self, ids: list[int], gbnf: str | None, max_new: int) -> list[int]:
        """Greedy decoding, the grammar (if any) applied at every step; the output ids
        without the end-of-generation token."""
        lib, ffi = self.llm.lib, self.llm.ffi
        chain = lib.llama_sampler_chain_init(lib.llama_sampler_chain_default_params())
        try:
            if gbnf is not None:
                g = lib.llama_sampler_init_grammar(
                    self.llm.vocab, ffi.new("char[]", gbnf.encode()), ffi.new("char[]", b"root")
                )
                if g == ffi.NULL:
                    raise ValueError("llama.cpp could not parse the GBNF grammar")
                lib.llama_sampler_chain_add(chain, g)
            lib.llama_sampler_chain_add(chain, lib.llama_sampler_init_greedy())
            t0 = time.perf_counter()
            self._prefill(ids)
            self.prefill_s = time.perf_counter() - t0
            out: list[int] = []
            for _ in range(max_new):
                tok = int(lib.llama_sampler_sample(chain, self.ctx, -1))
                if lib.llama_vocab_is_eog(self.llm.vocab, tok):
                    break
                out.append(tok)
                self._eval([tok], len(self.cached))
                self.cached.append(tok)
            return out
        finally:
            lib.llama_sampler_free(chain)
