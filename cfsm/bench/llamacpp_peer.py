"""The in-process llama.cpp peers of `cfsm bench peers`, on the same GGUF and prompt ids as
every other row, greedy, no jump-forward, sampling one of two ways:

- `server`: llama.cpp's `common_sampler`, what llama-server and llama-cli run: the chain
  without the grammar picks a token, the grammar checks that one token, and only when it
  rejects it is the grammar applied to the whole vocabulary and the token picked again;
- `full`: the grammar sampler in the chain, applied to the whole vocabulary at every step
  (llama-cpp-python's `Llama` class samples this way).

Both keep the previous prompt's common prefix in the cache, as llama-server does
(`cache_prompt`) and as cfsm's llama.cpp runner does. The grammars: llamacpp_grammar.py.
"""

from __future__ import annotations

import time

from engine.lazy import lazy_module

np = lazy_module("numpy")
SAMPLING = ("server", "full")
TOKEN_DATA = [("id", "<i4"), ("logit", "<f4"), ("p", "<f4")]  # llama_token_data


class LlamaCppGrammarPeer:
    """Its own llama.cpp context on the engine's loaded GGUF model, llama.cpp's default
    context settings (flash attention as llama.cpp picks it), one sequence. `step_threads`:
    threads for a one-token pass (llama.cpp's `n_threads`; a prompt uses every core)."""

    def __init__(self, llm, n_ctx: int = 4096, step_threads: int | None = None) -> None:
        self.llm = llm  # engine.runtimes.llamacpp_runner.LlamaModel
        lib, ffi = llm.lib, llm.ffi
        cp = lib.llama_context_default_params()
        cp.n_ctx, cp.n_batch, cp.n_seq_max = n_ctx, 512, 1
        cp.n_threads, cp.n_threads_batch = step_threads or llm.threads, llm.threads
        self.step_threads = cp.n_threads
        self.ctx = lib.llama_init_from_model(llm.model, cp)
        if self.ctx == ffi.NULL:
            raise RuntimeError("llama.cpp could not create the peer's context")
        self.mem = lib.llama_get_memory(self.ctx)
        self.batch = lib.llama_batch_init(512, 0, 1)
        self.n_vocab = int(lib.llama_vocab_n_tokens(llm.vocab))
        self._all = ffi.new("llama_token_data[]", self.n_vocab)  # the rejection path's array
        self._one = ffi.new("llama_token_data[]", 1)
        self.cached: list[int] = []
        self.prefill_s = 0.0  # the last generate()'s prompt evaluation
        self.rejections = 0  # server sampling: sampled tokens the grammar rejected

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

    def _grammar(self, gbnf: str):
        lib, ffi = self.llm.lib, self.llm.ffi
        g = lib.llama_sampler_init_grammar(
            self.llm.vocab, ffi.new("char[]", gbnf.encode()), ffi.new("char[]", b"root")
        )
        if g == ffi.NULL:
            raise ValueError("llama.cpp could not parse the GBNF grammar")
        return g

    def _server_pick(self, chain, grammar) -> int:
        """`common_sampler_sample`: the chain picks from the raw logits; the grammar checks
        that token alone; on rejection it masks the whole vocabulary and the chain picks
        again. The grammar then accepts the token."""
        lib, ffi = self.llm.lib, self.llm.ffi
        tok = int(lib.llama_sampler_sample(chain, self.ctx, -1))
        one = ffi.new("llama_token_data_array *", (self._one, 1, -1, False))
        self._one[0].id, self._one[0].logit, self._one[0].p = tok, 1.0, 0.0
        lib.llama_sampler_apply(grammar, one)
        if self._one[0].logit == float("-inf"):
            self.rejections += 1
            logits = lib.llama_get_logits_ith(self.ctx, -1)
            arr = np.frombuffer(ffi.buffer(self._all), dtype=TOKEN_DATA)
            arr["id"] = np.arange(self.n_vocab, dtype=np.int32)
            arr["logit"] = np.frombuffer(ffi.buffer(logits, 4 * self.n_vocab), dtype=np.float32)
            arr["p"] = 0.0
            full = ffi.new("llama_token_data_array *", (self._all, self.n_vocab, -1, False))
            lib.llama_sampler_apply(grammar, full)
            lib.llama_sampler_apply(chain, full)
            tok = int(self._all[full.selected].id)
        lib.llama_sampler_accept(grammar, tok)
        return tok

    def generate(
        self, ids: list[int], gbnf: str | None, max_new: int, sampling: str = "server"
    ) -> list[int]:
        """Greedy decoding under `gbnf` (none: unconstrained), sampled the `sampling` way;
        the output ids without the end-of-generation token."""
        lib = self.llm.lib
        chain = lib.llama_sampler_chain_init(lib.llama_sampler_chain_default_params())
        grammar = None if gbnf is None else self._grammar(gbnf)
        try:
            if grammar is not None and sampling == "full":
                lib.llama_sampler_chain_add(chain, grammar)  # the chain owns it now
                grammar = None
            lib.llama_sampler_chain_add(chain, lib.llama_sampler_init_greedy())
            t0 = time.perf_counter()
            self._prefill(ids)
            self.prefill_s = time.perf_counter() - t0
            out: list[int] = []
            for _ in range(max_new):
                if grammar is None:
                    tok = int(lib.llama_sampler_sample(chain, self.ctx, -1))
                else:
                    tok = self._server_pick(chain, grammar)
                if lib.llama_vocab_is_eog(self.llm.vocab, tok):
                    break
                out.append(tok)
                self._eval([tok], len(self.cached))
                self.cached.append(tok)
            return out
        finally:
            lib.llama_sampler_free(chain)
            if grammar is not None:
                lib.llama_sampler_free(grammar)
