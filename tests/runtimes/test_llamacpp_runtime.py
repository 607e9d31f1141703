"""The llama.cpp runtime: the embedded GGUF decoded by llama.cpp behind the same Runner
contract as the PyTorch path (crops, batched passes, freed sequences), chosen by default
on the CPU, and every backend's outputs valid on it."""

from __future__ import annotations

import json
import re
import shutil
import threading

import pytest
import torch

from cfsm.bench.batch import run_batch
from engine.backends import BACKENDS
from engine.constraint import Constraint
from engine.decoding.model import embedded_gguf_path, gguf_file, resolve_runtime
from engine.decoding.request import GenerateRequest
from engine.errors import CfsmError
from engine.runtimes.base import CostModel, Feed
from engine.runtimes.host_threads import torch_ops_on_one_thread


def test_a_gguf_model_on_the_cpu_defaults_to_llamacpp(tmp_path):
    assert resolve_runtime(None, None, "cpu") == "llamacpp"
    assert resolve_runtime("auto", "embedded", "cpu") == "llamacpp"
    assert resolve_runtime("transformers", None, "cpu") == "transformers"
    hf = tmp_path / "hf"
    hf.mkdir()
    (hf / "config.json").write_text("{}")
    assert resolve_runtime(None, str(hf), "cpu") == "transformers"
    with pytest.raises(CfsmError) as e:
        resolve_runtime("llamacpp", str(hf), "cpu")
    assert e.value.kind == "unknown_model" and "GGUF" in e.value.message
    with pytest.raises(CfsmError) as e:
        resolve_runtime("vllm", None, "cpu")
    assert e.value.kind == "invalid_input"


def test_a_gguf_file_or_a_folder_with_one_is_a_gguf_model(tmp_path):
    one = tmp_path / "one"
    one.mkdir()
    (one / "m.gguf").symlink_to(embedded_gguf_path())
    assert gguf_file(str(one)) == one / "m.gguf"
    assert gguf_file(str(one / "m.gguf")) == one / "m.gguf"
    (one / "n.gguf").symlink_to(embedded_gguf_path())
    with pytest.raises(CfsmError) as e:
        gguf_file(str(one))
    assert "2 GGUF files" in e.value.message


def test_cost_model_interpolates_between_measured_prefills():
    c = CostModel(10.0, {8: 40.0, 32: 130.0})
    assert c.pass_ms(1) == 10.0
    assert c.pass_ms(8) == 40.0
    assert c.pass_ms(20) == pytest.approx(85.0)
    assert c.pass_ms(64) == pytest.approx(250.0)  # extrapolated along the last segment
    assert c.to_json()["prefill_32_in_steps"] == 13.0


@pytest.fixture(scope="module")
def llama(engine):
    dec = engine.ensure_model("llamacpp")
    assert dec.runner.name == "llamacpp"
    return dec


@pytest.mark.model
def test_the_embedded_model_decodes_on_llamacpp_by_default(engine, llama):
    assert engine.runtime == "llamacpp" and engine.decoder is llama
    check = llama.lm.self_check
    assert max(check["max_logprob_diff"].values()) == 0.0  # flash attention: exact
    costs = check["costs"]
    assert costs["step_ms"] > 0 and costs["prefill_32_in_steps"] > 1
    tr = engine.generate(
        GenerateRequest.from_inputs("Is water wet?", Constraint("regex", "(yes|no)"))
    ).to_json()
    assert tr["model"]["runtime"] == tr["totals"]["runtime"] == "llamacpp"
    assert tr["text"] in ("yes", "no") and tr["valid"]
    assert tr["totals"]["est_masked_ms"] > 0


@pytest.mark.model
def test_llamacpp_crop_and_batch_give_a_fresh_prefills_logits(llama):
    run, tok = llama.runner, llama.lm.tokenizer
    a = llama.prompt_ids("Name a colour.", raw=False)
    b = llama.prompt_ids("Write a long sentence about the sea and the sky.", raw=False)
    old, new = (tok.encode(t, add_special_tokens=False) for t in ("Blue is", "Red and green"))
    ca, cb = run.new_cache(), run.new_cache()
    try:
        run.forward([Feed(ca, a + old), Feed(cb, b)])
        run.crop(ca, len(a))  # a jump-forward back to a common prefix
        assert ca.get_seq_length() == len(a)
        rows, _ = run.forward([Feed(ca, new, keep=2), Feed(cb, [11])])
        for ids, got in ((a + new, rows[0]), (b + [11], rows[1])):
            fresh = run.new_cache()
            (want,), _ = run.forward([Feed(fresh, ids, keep=got.shape[0])])
            run.free(fresh)
            assert torch.allclose(got, want, atol=1e-4), float((got - want).abs().max())
    finally:
        run.free(ca)
        run.free(cb)


@pytest.mark.model
def test_finished_and_cancelled_requests_give_their_sequence_back(engine, llama):
    free = len(llama.runner._free_ids)
    c = Constraint("regex", r"[a-z ]{50,80}")
    tr = engine.generate(
        GenerateRequest.from_inputs("Say something.", c, max_new_tokens=8)
    ).to_json()
    assert tr["totals"]["reason"] == "max_new_tokens"
    tr = engine.generate(
        GenerateRequest.from_inputs("Say something.", c), should_stop=lambda: True
    ).to_json()
    assert tr["totals"]["reason"] == "cancelled"
    assert len(llama.runner._free_ids) == free


PERSON = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 20},
        "age": {"type": "integer", "minimum": 0, "maximum": 120},
    },
    "required": ["name", "age"],
    "additionalProperties": False,
}


@pytest.mark.model
@pytest.mark.parametrize("backend", BACKENDS)
def test_every_backend_decodes_valid_outputs_on_llamacpp(engine, llama, backend):
    import jsonschema

    c = Constraint("schema", json.dumps(PERSON))
    for mode in ("masked", "jump"):
        tr = engine.generate(
            GenerateRequest.from_inputs(
                "Give a JSON record for a teacher.",
                c,
                mode=mode,
                backend=backend,
                max_new_tokens=60,
                runtime="llamacpp",
            )
        ).to_json()
        assert tr["totals"]["finished"] and tr["valid"], tr["text"]
        jsonschema.validate(json.loads(tr["text"]), PERSON)
        assert tr["totals"]["runtime"] == "llamacpp"


@pytest.mark.model
def test_a_batch_on_llamacpp_equals_single_runs(engine, llama, paper_bench, character_regex):
    c = Constraint("regex", character_regex)
    comp = engine.compile(c, "fsm").compiled
    prompts = [
        paper_bench["character"]["prompt_template"].format(name=n) for n in ("Dobby", "Hagrid")
    ]
    batch = run_batch(llama, prompts, comp, mode="jump")
    for p, text in zip(prompts, batch["texts"], strict=True):
        single = engine.generate(
            GenerateRequest(prompt=p, constraint=c, mode="jump", healing_tokens=0)
        ).to_json()
        assert single["text"] == text
        assert re.fullmatch(character_regex, text)


@pytest.mark.model
def test_a_gguf_path_loads_on_llamacpp(tmp_path):
    from engine.serving.service import Engine

    folder = tmp_path / "models"
    folder.mkdir()
    shutil.copy(embedded_gguf_path(), folder / "smol.gguf")  # a user's own GGUF file
    eng = Engine(str(folder), load_weights=False)
    try:
        assert eng.runtime == "llamacpp"
        dec = eng.ensure_model()
        assert dec.model_info()["runtime"] == "llamacpp"
        assert dec.model_info()["architecture"] == "llama"
        tr = eng.generate(
            GenerateRequest.from_inputs("Is water wet?", Constraint("regex", "(yes|no)"))
        ).to_json()
        assert tr["text"] in ("yes", "no")
    finally:
        eng.close()


@pytest.mark.model
def test_a_long_prefill_gives_the_one_token_paths_logits(llama):
    """From 64 tokens a call, llama.cpp's CPU products take another path (0.54 apart on
    this model); the runner's 32-token micro-batches keep a 100-token prompt's logits
    equal to 99 tokens and a step, so jump-forward never changes an output numerically."""
    run, tok = llama.runner, llama.lm.tokenizer
    ids = tok.encode("The quick brown fox jumps over the lazy dog. " * 12, add_special_tokens=False)
    ids = ids[:100]
    whole, split = run.new_cache(), run.new_cache()
    try:
        (a,), _ = run.forward([Feed(whole, ids)])
        run.forward([Feed(split, ids[:-1])])
        (b,), _ = run.forward([Feed(split, ids[-1:])])
    finally:
        run.free(whole)
        run.free(split)
    assert torch.equal(a, b), float((a - b).abs().max())


@pytest.mark.model
def test_a_request_freed_while_another_decodes_leaves_its_logits_unchanged(llama, monkeypatch):
    """With flash attention llama.cpp's CPU kernel sums a sequence's cells in cell order:
    a freed request's cells before a live one's, filled by its next token, moved that
    token's logits by 0.53 on this model. The runner keeps given-up cells until no
    request is live."""
    run, tok = llama.runner, llama.lm.tokenizer
    monkeypatch.setattr(run, "_reuse", False)  # shared prompt cells would hide the order
    ids = tok.encode("The quick brown fox jumps over the lazy dog again.", add_special_tokens=False)
    other = tok.encode("Hello there, how are you", add_special_tokens=False)
    ref, x, y = run.new_cache(), run.new_cache(), run.new_cache()
    try:
        (want,), _ = run.forward([Feed(ref, ids)])
        run.free(ref)
        run.forward([Feed(x, other)])
        run.forward([Feed(y, ids[:-1])])
        run.free(x)  # its cells lie before y's
        (got,), _ = run.forward([Feed(y, ids[-1:])])
    finally:
        for c in (ref, x, y):
            run.free(c)
    assert torch.equal(got, want), float((got - want).abs().max())


@pytest.mark.model
def test_a_rerun_shares_the_prompt_and_decodes_the_same(engine, llama, monkeypatch):
    """The latest prompt stays cached; a request whose prompt starts the same way shares
    those positions (all but the last, whose logits it needs) and decodes as if fresh."""
    c = Constraint("regex", r"(red|green|blue)[a-z ]{0,20}")
    req = GenerateRequest.from_inputs("Name a colour and say why.", c, max_new_tokens=12)
    engine.generate(req)
    again = engine.generate(req).to_json()
    t = again["totals"]
    assert t["prompt_cached_tokens"] == t["prompt_tokens"] - 1
    assert t["est_masked_ms"] < llama.runner.costs.pass_ms(t["prompt_tokens"]) + (
        llama.runner.costs.step_ms * t["output_tokens"]
    )  # the masked baseline shares the prompt too
    monkeypatch.setattr(llama.runner, "_reuse", False)
    fresh = engine.generate(req).to_json()
    assert fresh["totals"]["prompt_cached_tokens"] == 0
    assert again["text"] == fresh["text"] and again["valid"]
    assert [s["prob"] for s in again["steps"]] == [s["prob"] for s in fresh["steps"]]


@pytest.mark.model
def test_a_rerun_that_jumps_first_shares_no_more_than_its_prompt(engine, llama):
    """A constraint that starts with forced text feeds the prompt and the jumped tokens in
    the first pass; the summary's 'N of the prompt's M tokens were shared' counts only
    the prompt's (it read '57 of the prompt's 53')."""
    c = Constraint("regex", r'\{"name": "[A-Za-z ]{1,12}"\}')
    req = GenerateRequest.from_inputs("Give a name as JSON.", c, max_new_tokens=12)
    first = engine.generate(req).totals
    t = engine.generate(req).totals
    assert t.prompt_cached_tokens == t.prompt_tokens  # the whole prompt, and no more
    # and the second run compiled nothing: its compile card says the time is the cached one's
    from viz.cards import stat_cards

    assert not first.compile_cached and t.compile_cached
    assert "compile (cached, from an earlier run)" in stat_cards(t)
    assert "compile (cached" not in stat_cards(first)


@pytest.mark.model
def test_a_run_that_jumps_nothing_saves_no_time_on_the_cost_model(engine, llama):
    """The date preset's regex jumps nothing (every character is a choice): the cost
    model's time for the run equals its time for the same output decoded masked (the
    page said '5% decode time saved' beside 0 jumps and 0% passes saved). Equal to the last
    bit: both are priced from the same pass counts (summed pass by pass, a float could
    round to 316.458 against 316.459, CI of stop 53)."""
    c = Constraint("regex", r"(19|20)[0-9]{2}-(0[1-9]|1[0-2])-(0[1-9]|[12][0-9]|3[01])")
    for mode in ("masked", "jump"):
        tr = engine.generate(
            GenerateRequest.from_inputs("When did it happen?", c, mode=mode, max_new_tokens=16)
        ).to_json()
        t = tr["totals"]
        assert not tr["jumps"] and tr["valid"], mode
        assert t["est_forward_ms"] == t["est_masked_ms"] > 0, mode


def test_one_thread_torch_ops_stay_in_their_thread_and_end_with_the_context():
    before, seen = torch.get_num_threads(), {}

    def decode_loop():
        with torch_ops_on_one_thread() as applied:
            seen["applied"], seen["inside"] = applied, torch.get_num_threads()
            torch.softmax(torch.randn(49152), 0)  # a vocabulary-wide op, as sampling does
            other = threading.Thread(target=lambda: seen.update(other=torch.get_num_threads()))
            other.start()
            other.join()
        seen["after"] = torch.get_num_threads()

    t = threading.Thread(target=decode_loop)
    t.start()
    t.join()
    assert seen["applied"] and seen["inside"] == 1
    # a thread started meanwhile (a transformers decode loop) keeps the default
    assert seen["other"] == before
    assert seen["after"] == before == torch.get_num_threads()


@pytest.mark.model
def test_llamacpp_samples_on_one_core_and_leaves_the_callers_threads(engine, llama):
    before, counts = torch.get_num_threads(), set()
    tr = engine.generate(
        GenerateRequest.from_inputs("Is water wet?", Constraint("regex", "(yes|no)")),
        # a step's event comes from the thread that sampled it
        on_event=lambda kind, ev: kind == "step" and counts.add(torch.get_num_threads()),
    ).to_json()
    assert tr["valid"] and counts == {1}
    assert torch.get_num_threads() == before


@pytest.fixture(scope="module")
def small_cache(llama):
    """The embedded GGUF on a second llama.cpp context of 512 KV cells (the minimum a user
    may set is 256), sharing the default decoder's tokenizer: a few SGLang character
    requests overflow it, each fits alone."""
    import dataclasses

    from engine.decoding.decoder import Decoder
    from engine.runtimes.llamacpp_runner import LlamaCppRunner, LlamaModel

    lm = LlamaModel(str(embedded_gguf_path()), n_ctx=512)
    runner = LlamaCppRunner(lm)
    runner.costs = llama.runner.costs
    loaded = dataclasses.replace(llama.lm, model=lm, runner=runner)
    return Decoder(loaded, ctx=llama.ctx)


CHARACTER_NAMES = ("Dobby", "Hagrid", "Luna Lovegood", "Severus Snape", "Minerva McGonagall")


@pytest.mark.model
def test_a_full_cache_makes_requests_wait_and_each_equals_its_single_run(
    engine, llama, small_cache, paper_bench, character_regex
):
    """Five character requests (prompt and output about 200 cells each) on 512 cells: they
    cannot all be live at once, so requests wait for cells and, when the oldest needs room,
    every live one is evicted and recomputes its tokens. None fails, each output equals
    the same request decoded alone on the default context, and a waiting request tells its
    listener (the page's status line) each pass it sits out, with the requests ahead."""
    c = Constraint("regex", character_regex)
    comp = engine.compile(c, "fsm").compiled
    prompts = [paper_bench["character"]["prompt_template"].format(name=n) for n in CHARACTER_NAMES]
    runner = small_cache.runner
    evictions = runner.evictions
    waits: list[list] = [[] for _ in prompts]

    def on(i: int):
        return lambda kind, ev: waits[i].append(ev) if kind == "wait" else None

    seqs = [
        small_cache.sequence(GenerateRequest(prompt=p, constraint=c, mode="jump"), comp, on(i))
        for i, p in enumerate(prompts)
    ]
    small_cache.run_many(seqs)
    assert [s.error for s in seqs] == [None] * len(seqs)
    held = [s.n.kv_held_passes for s in seqs]
    assert [len(w) for w in waits] == held  # one event a held pass
    for w in waits:
        assert [e.held_passes for e in w] == list(range(1, len(w) + 1))
        assert all(e.ahead >= 1 for e in w)  # the oldest request is never held back
    recomputed = [s.n.recomputed_tokens for s in seqs]
    assert runner.evictions > evictions, (held, recomputed)
    assert sum(held) > 0 and sum(recomputed) > 0, (held, recomputed)
    for p, s in zip(prompts, seqs, strict=True):
        alone = engine.generate(GenerateRequest(prompt=p, constraint=c, mode="jump")).to_json()
        text = small_cache.texts.bytes(s.out_ids).decode("utf-8")
        assert text == alone["text"] and re.fullmatch(character_regex, text)
        assert len(s.prompt_ids) + len(s.out_ids) < 512  # each fits alone
    assert not runner._live and runner._grave == 0  # everything given back


@pytest.mark.model
def test_a_request_that_cannot_fit_alone_fails_and_the_others_finish(small_cache, engine):
    """Only a request whose own prompt and output exceed the cache is refused
    (exceeds_capacity, with the cells it needs); the request beside it decodes to its end."""
    c = Constraint("regex", "(yes|no)")
    comp = engine.compile(c, "fsm").compiled
    big = small_cache.sequence(
        GenerateRequest(prompt="Is water wet? " * 200, constraint=c, mode="jump"), comp
    )
    ok = small_cache.sequence(
        GenerateRequest(prompt="Is water wet?", constraint=c, mode="jump"), comp
    )
    small_cache.run_many([big, ok])
    assert isinstance(big.error, CfsmError) and big.error.kind == "exceeds_capacity"
    assert "KV cells" in big.error.message and "512" in big.error.message
    assert ok.error is None and ok.finished
    assert small_cache.texts.bytes(ok.out_ids).decode() in ("yes", "no")


def test_threads_follow_the_cpus_this_process_may_use(tmp_path):
    """A container's quota (`docker run --cpus=2` on a big host) bounds the threads, not
    the host's core count; no quota leaves the affinity mask's count."""
    import os

    from engine.runtimes.host_threads import usable_cpus

    allowed = len(os.sched_getaffinity(0))
    (tmp_path / "cpu.max").write_text("max 100000\n")
    assert usable_cpus(str(tmp_path)) == allowed
    (tmp_path / "cpu.max").write_text("100000 100000\n")
    assert usable_cpus(str(tmp_path)) == 1
    (tmp_path / "cpu.max").write_text("150000 100000\n")
    assert usable_cpus(str(tmp_path)) == min(allowed, 2)
    v1 = tmp_path / "v1"
    (v1 / "cpu").mkdir(parents=True)
    (v1 / "cpu" / "cpu.cfs_quota_us").write_text("100000\n")
    (v1 / "cpu" / "cpu.cfs_period_us").write_text("100000\n")
    assert usable_cpus(str(v1)) == 1


@pytest.mark.parametrize(
    "env, value", [("CFSM_LLAMA_N_SEQ", "1"), ("CFSM_LLAMA_N_SEQ", "x"), ("CFSM_LLAMA_N_CTX", "8")]
)
def test_llamacpp_settings_out_of_range_are_refused_at_load(env, value):
    """CFSM_LLAMA_N_SEQ=1 left no id for requests and made the retired-cells id -1, which
    llama.cpp reads as every sequence; a bad setting is now a one-line error at load."""
    import subprocess
    import sys

    code = (
        "from engine.runtimes.llamacpp_runner import LlamaModel\n"
        "from engine.errors import CfsmError\n"
        "try:\n    LlamaModel('/nonexistent.gguf')\n"
        "except CfsmError as e:\n    print(e.kind, e.message)\n"
    )
    env_all = {**__import__("os").environ, env: value}
    out = subprocess.run(
        [sys.executable, "-c", code], env=env_all, capture_output=True, text=True, timeout=60
    )
    assert out.stdout.startswith(f"invalid_input {env}="), out.stdout + out.stderr


@pytest.mark.model
def test_requests_starting_together_share_the_kept_prompt_and_decode_as_alone(llama, monkeypatch):
    """Concurrent users of one system prompt compute it once: first feeds in one pass,
    beside a live request, each share the kept prompt's positions they start with, and
    their logits (and a step's after) are a fresh prefill's, bit for bit."""
    run, tok = llama.runner, llama.lm.tokenizer
    base = tok.encode("You are a terse assistant. Answer in one word. ", add_special_tokens=False)
    asks = [base + tok.encode(q, add_special_tokens=False) for q in ("Is fire hot?", "Sky?")]
    monkeypatch.setattr(run, "_reuse", False)
    want = []
    for ids in asks:
        c = run.new_cache()
        try:
            (first,), _ = run.forward([Feed(c, ids)])
            (step,), _ = run.forward([Feed(c, ids[-1:])])
            want.append((first, step))
        finally:
            run.free(c)
    monkeypatch.setattr(run, "_reuse", True)
    kept, live, *caches = [run.new_cache() for _ in range(4)]
    try:
        run.forward([Feed(kept, base + tok.encode("Hi", add_special_tokens=False))])  # kept
        run.free(kept)
        # another user alone, with the same system prompt: its prompt becomes the kept one
        run.forward([Feed(live, base + tok.encode("Why?", add_special_tokens=False))])
        firsts, _ = run.forward([Feed(c, ids) for c, ids in zip(caches, asks, strict=True)])
        steps, _ = run.forward([Feed(c, ids[-1:]) for c, ids in zip(caches, asks, strict=True)])
        assert [c.reused for c in caches] == [len(base), len(base)]
    finally:
        for c in (kept, live, *caches):
            run.free(c)
    for (f, s), got_f, got_s in zip(want, firsts, steps, strict=True):
        assert torch.equal(got_f, f) and torch.equal(got_s, s)


@pytest.mark.model
def test_compares_sides_start_from_the_same_cold_cache_whatever_was_kept(engine):
    """Compare's sides computed their prompts from whatever the runtime had kept: primed
    each side's prompt first, a busy server's other requests left theirs, and the sides
    shared 8, 24 or 53 of 53 prompt tokens. Each side now computes its whole prompt."""
    from engine.constraint import Constraint
    from engine.decoding.request import GenerateRequest

    c = Constraint("regex", "(yes|no), because [a-z ]{1,20}")
    ask = "Is the sea blue? Answer and say why."
    # a kept prompt that begins the same way (the same chat template), as a page's last run
    engine.generate(GenerateRequest.from_inputs(ask + " Be brief.", c, max_new_tokens=4))
    a = GenerateRequest.from_inputs(ask, c, mode="masked", max_new_tokens=12)
    b = GenerateRequest.from_inputs(ask, c, mode="jump", max_new_tokens=12)
    ta, tb = engine.side_by_side(a, b)
    assert ta.totals.prompt_cached_tokens == tb.totals.prompt_cached_tokens == 0
    assert ta.totals.prefill_ms > 0 and tb.totals.prefill_ms > 0
    # an ordinary run still shares the kept prompt
    again = engine.generate(GenerateRequest.from_inputs(ask, c, max_new_tokens=4))
    assert again.totals.prompt_cached_tokens > 0
