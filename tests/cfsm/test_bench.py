"""Benchmark plumbing on small inputs (the benchmarks themselves are run by `cfsm bench`)."""

import json
import re

import pytest
from openmp_teams import native_threads_added_by, needs_teams

from cfsm.bench.decode import paper_items
from cfsm.bench.jsonschemabench import summarize, walk_instance
from engine.backends import NATIVE_BACKENDS
from engine.constraint import Constraint
from engine.decoding.trace import Totals
from engine.errors import CfsmError
from engine.schema import reorder_like_schema
from engine.serving.compile_cache import CompileCache

SCHEMA = {
    "type": "object",
    "properties": {"n": {"type": "integer"}, "tag": {"enum": ["alpha", "beta"]}},
    "required": ["n", "tag"],
    "additionalProperties": False,
}


def test_paper_items_cover_both_tasks(paper_bench):
    rx, items = paper_items("character", 50)
    assert len(items) == 50 and "Harry Potter" in items[0][1]
    rx, items = paper_items("city", 10)
    assert len(items) >= 6 and all("Page begin." in p and len(p) > 200 for _, p in items)


def test_walk_instance_accepts_valid_and_rejects_invalid(ctx):
    cache = CompileCache(ctx, use_worker=False)
    try:
        for backend in ("fsm", "xgrammar", "llguidance"):
            comp = cache.get(Constraint("schema", json.dumps(SCHEMA), "compact"), backend).compiled
            good = json.dumps(
                reorder_like_schema({"tag": "beta", "n": 12}, SCHEMA), separators=(",", ":")
            )
            assert good == '{"n":12,"tag":"beta"}'
            w = walk_instance(comp, ctx.tokenizer, ctx.vocab.token_bytes, good)
            assert w["accepted"], backend
            assert len(w["mask_s"]) >= 3
            assert 0 < w["covered"] < w["bytes"]  # `{"n":` and `,"tag":"` are forced
            bad = walk_instance(
                comp, ctx.tokenizer, ctx.vocab.token_bytes, '{"n":12,"tag":"gamma"}'
            )
            assert not bad["accepted"], backend
    finally:
        cache.close()


def test_summary_counts_coverage_maskbench_passes_and_leaks():
    rows = [
        {
            "subset": "s",
            "id": "a",
            "record": True,
            "backends": {
                "xgrammar": {
                    "compiled": True,
                    "compile_s": 0.01,
                    "mask_us": [5.0, 7.0],
                    "valid": 2,
                    "valid_accepted": 2,
                    "invalid": 1,
                    "invalid_accepted": [0],
                    "maskbench_pass": False,
                    "jump_covered_bytes": 10,
                    "instance_bytes": 40,
                },
                "llguidance": {
                    "compiled": False,
                    "error": "unsupported_feature",
                    "message": "`not` at /properties/a/not is not enforced",
                },
            },
        },
        {
            "subset": "s",
            "id": "b",
            "record": True,
            "backends": {
                "xgrammar": {"compiled": False, "error": "compile_timeout", "message": "15 s"},
                "llguidance": {
                    "compiled": True,
                    "compile_s": 0.03,
                    "mask_us": [1.0],
                    "valid": 1,
                    "valid_accepted": 1,
                    "invalid": 0,
                    "invalid_accepted": [],
                    "maskbench_pass": True,
                },
            },
        },
    ]
    res = summarize(rows, list(NATIVE_BACKENDS), memory={"idle_mib": 1})
    x, g = res["summary"]["xgrammar"], res["summary"]["llguidance"]
    assert x["coverage"] == 0.5 and x["jump_share_of_instance_bytes"] == 0.25
    assert (x["maskbench_passed"], g["maskbench_passed"], x["records"]) == (0, 1, 2)
    assert x["mask_us_mean"] == 6.0 and x["compile_ms_max"] == 10.0
    assert (x["refusals_naming_a_pointer"], g["refusals_naming_a_pointer"]) == (0, 1)
    assert x["errors"] == {"compile_timeout": 1}
    assert res["best_single"] == {"backend": "xgrammar", "compiled": 1}
    assert res["memory"] == {"idle_mib": 1}
    assert res["invalid_instances_accepted"] == [
        {"subset": "s", "id": "a", "backend": "xgrammar", "tests": [0]}
    ]


@pytest.mark.usefixtures("jsonschemabench")
def test_the_sample_is_every_schema_then_the_maskbench_only_records():
    from cfsm.bench.jsonschemabench import SUBSETS, sample

    items = sample()
    subsets = list(dict.fromkeys(i.subset for i in items))
    assert subsets[: len(SUBSETS)] == SUBSETS and {"JME", "MCPspec", "BFCL_simple"} <= set(subsets)
    assert sum(i.subset in SUBSETS for i in items) == 400
    assert all(i.record is not None for i in items if i.subset not in SUBSETS)
    first = sample(1, ["Kubernetes", "JME"])
    assert [(i.subset, i.record is not None) for i in first] == [
        ("Kubernetes", True),
        ("JME", True),
    ]
    assert json.loads(first[1].schema_text) == first[1].record["schema"]


@pytest.mark.usefixtures("jsonschemabench")
def test_a_fast_slice_of_the_real_sample_on_fsm_llguidance_and_auto(compile_engine):
    """`cfsm bench jsonschemabench` on a slice of the shared sample as a server compiles
    it: no backend accepts an invalid instance; auto compiles at least what each backend
    does, and what it refuses names a JSON pointer; a MaskBench pass accepts every valid
    instance of its record; the memory is measured."""
    from cfsm.bench.jsonschemabench import run

    res = run(
        compile_engine,
        ["fsm", "llguidance", "auto"],
        per_subset=1,
        subsets=["Github_easy", "Snowplow", "WashingtonPost", "MCPspec"],
        log=lambda *_: None,
    )
    s = res["summary"]
    assert res["schemas"] == 4 and res["invalid_instances_accepted"] == []
    assert s["auto"]["compiled"] >= max(s["fsm"]["compiled"], s["llguidance"]["compiled"])
    assert s["auto"]["compiled"] > s["fsm"]["compiled"]  # Snowplow's counted repeat: llguidance
    assert s["auto"]["chosen"]["llguidance"] >= 1 and s["auto"]["chosen"]["fsm"] >= 1
    refused = s["auto"]["schemas"] - s["auto"]["compiled"]
    assert refused >= 1 and s["auto"]["refusals_naming_a_pointer"] == refused
    for row in res["rows"]:
        for r in row["backends"].values():
            if r.get("maskbench_pass"):
                assert r["valid_accepted"] == r["valid"] and not r["invalid_accepted"]
    assert s["fsm"]["masks"] > 0 and s["fsm"]["mask_us_p99"] >= s["fsm"]["mask_us_p50"] > 0
    assert res["memory"]["peak_mib"] >= res["memory"]["idle_mib"] > 0


def test_html_report(tmp_path):
    from cfsm.bench.report import write_report

    rows = [
        {
            "subset": "s",
            "id": "a",
            "record": True,
            "backends": {
                "xgrammar": {
                    "compiled": True,
                    "compile_s": 0.01,
                    "mask_us": [5.0],
                    "valid": 1,
                    "valid_accepted": 1,
                    "invalid": 0,
                    "invalid_accepted": [],
                    "jump_covered_bytes": 3,
                    "instance_bytes": 9,
                }
            },
        }
    ]
    html = write_report(summarize(rows, ["xgrammar"]), tmp_path / "r.html").read_text()
    assert "Compile coverage" in html and "plotly" in html.lower()


@pytest.mark.model
def test_peers_suite_runs_every_system_on_the_same_prompts_and_checks_every_output(engine):
    """Small tasks through outlines, transformers+xgrammar, transformers+llguidance,
    llama.cpp+grammar and cfsm masked/jump on both runtimes: one row per (task, system), each
    constrained output checked by the task's validator, compile times measured side by side."""
    import pytest

    from cfsm.bench.llama_server import server_binary
    from cfsm.bench.peers import (
        HTTP_PEERS,
        NOT_COMPACT,
        REFERENCE,
        SYSTEMS,
        Task,
        run_peers,
    )
    from cfsm.bench.peers_report import format_table

    small = {
        "type": "object",
        "properties": {"ok": {"type": "boolean"}},
        "required": ["ok"],
        "additionalProperties": False,
    }
    tasks = [
        Task(
            "yes/no (regex)", Constraint("regex", "(yes|no)"), ["Is water wet? Answer yes or no."]
        ),
        Task(
            "ok (schema)",
            Constraint("schema", json.dumps(small), "compact"),
            ["Is the sky blue? Answer as JSON."],
        ),
    ]
    assert tasks[0].valid("yes") and not tasks[0].valid("yes!") and tasks[1].valid('{"ok":true}')
    assert not tasks[1].valid('{"ok":1}')
    llm = engine.ensure_model("llamacpp").lm.model
    before = (dict(llm.pass_threads.fixed), engine.ensure_model("llamacpp").remeasure_costs)
    needs_teams(engine.ensure_model("llamacpp").runner)
    res: dict = {}
    # from a thread that lives on, as the command line's main thread does: the PyTorch
    # peers and the llama.cpp peer run OpenMP work, and on that thread they started a second
    # team beside the pass thread's, which slowed every pass of every row
    added = native_threads_added_by(
        lambda: res.update(run_peers(engine, tasks, max_new_tokens=16, log=lambda *_: None))
    )
    assert added == set(), f"{len(added)} more native threads: a second OpenMP team"
    # the bench pins the step's thread count for its own runs only: the shared engine
    # gets its settings back (later runs choose by timing again, and re-measure costs)
    after = (dict(llm.pass_threads.fixed), engine.ensure_model("llamacpp").remeasure_costs)
    assert after == before
    systems = [s for s in SYSTEMS if server_binary() or s not in HTTP_PEERS]
    assert [(r["task"], r["system"]) for r in res["rows"]] == [
        (t.name, s)
        for t in tasks
        for s in systems
        if t.constraint.kind != "regex" or s not in NOT_COMPACT
    ]
    for r in res["rows"]:
        assert r["valid"] == r["runs"] == 1 or r["system"] == REFERENCE, r
        assert r["output_tokens"] >= 1 and r["wall_s"] > 0 and r["compile_s"] >= 0
        assert r["output_chars"] == len(r["texts"][0]) and r["texts"][0].startswith(r["sample"])
    assert set(res["summary"]) == {t.name for t in tasks}
    assert all(
        not s["fastest_peer"].startswith("cfsm") and s["all_valid"] and s["cfsm_valid"]
        for s in res["summary"].values()
    )
    yes_no = [
        r["texts"][0]
        for r in res["rows"]
        if r["task"] == "yes/no (regex)" and r["system"] != REFERENCE
    ]
    assert len(set(yes_no)) == 1, (
        yes_no
    )  # same prompt ids, greedy, same language: the same answer everywhere
    assert all(s["llamacpp_jump_vs_llama_server_sampler"] > 0 for s in res["summary"].values())
    costs = res["llama_cpp_costs"]
    assert set(costs["step_ms"]) == {1, engine.ensure_model("llamacpp").lm.model.threads}
    assert costs["step_ms"][costs["best_threads"]] == min(costs["step_ms"].values())
    jump = {r["task"]: r for r in res["rows"] if r["system"] == "cfsm jump (llama.cpp)"}
    for task in tasks:  # a bound from measured costs (how close is a benchmark's figure)
        r = jump[task.name]
        assert r["limit_s"] > 0  # the ratio shown is the one of the figures shown
        assert r["jump_vs_limit"] == pytest.approx(r["wall_s"] / r["limit_s"], abs=0.006)
    assert res["runtimes"]["llamacpp"]["runtime"] == "llamacpp"
    speed = res["compile"]["seconds"]
    assert set(speed) == {
        "outlines-core Index",
        "fsm, lazy (states indexed as decoding reaches them)",
        "fsm, every state indexed up front (what Index builds)",
        "fsm, the default (states indexed ahead at compile, within a budget)",
        "xgrammar",
        "llguidance",
        "fsm, cached (engine compile cache)",
    }
    assert res["compile"]["vs_outlines_core"]["outlines-core Index"] == pytest.approx(1.0)
    assert "| yes/no (regex) | cfsm jump (llama.cpp) |" in format_table(res)
    assert "| yes/no (regex) | llama-server sampler |" in format_table(res)
    assert "| ok (schema) | llama-server sampler, optional whitespace * |" in format_table(res)
    json.dumps(res)  # the --json line


@pytest.mark.model
def test_the_llamacpp_peers_get_grammars_llamacpp_parses_for_every_default_task(
    engine, paper_bench
):
    """The peers benchmark's llama.cpp rows: GBNF printed from each task's regex, or
    llama.cpp's JSON-schema rules on its schema, compact and with its optional whitespace."""
    from cfsm.bench.llamacpp_grammar import WHITESPACE, regex_gbnf, schema_gbnf
    from cfsm.bench.peers import default_tasks
    from engine.regex.normalize import normalize_regex

    llm = engine.ensure_model("llamacpp").lm.model
    lib, ffi = llm.lib, llm.ffi
    for task in default_tasks(1):
        c = task.constraint
        for ws in WHITESPACE:
            if c.kind == "regex":
                gbnf = regex_gbnf(normalize_regex(c.text))
            else:
                gbnf = schema_gbnf(json.loads(c.text), ws)
            g = lib.llama_sampler_init_grammar(
                llm.vocab, ffi.new("char[]", gbnf.encode()), ffi.new("char[]", b"root")
            )
            assert g != ffi.NULL, (task.name, ws, gbnf[:200])
            lib.llama_sampler_free(g)


@pytest.mark.model
def test_the_llama_server_sampler_checks_the_sampled_token_and_resamples_on_rejection(engine):
    """common_sampler's scheme: the grammar sees the greedy token first and masks the whole
    vocabulary only when it rejects it; its output is the full-vocabulary sampler's output
    (greedy, same grammar), and valid."""
    from cfsm.bench.llamacpp_grammar import regex_gbnf
    from cfsm.bench.llamacpp_peer import LlamaCppGrammarPeer

    rt = engine.ensure_model("llamacpp")
    peer = LlamaCppGrammarPeer(rt.lm.model)
    try:
        ids = rt.prompt_ids("Say hello.", raw=False)
        gbnf = regex_gbnf("[0-9]{3}-[a-z]{2}")  # no greeting fits: the first token is rejected
        server = peer.generate(ids, gbnf, 16, "server")
        rejected = peer.rejections
        full = peer.generate(ids, gbnf, 16, "full")
    finally:
        peer.close()
    text = engine.ctx.tokenizer.decode(server)
    assert rejected >= 1 and server == full
    assert re.fullmatch("[0-9]{3}-[a-z]{2}", text), text


@pytest.mark.model
def test_the_paper_suite_says_how_often_jump_changes_the_output(engine, paper_bench):
    """Per backend: how many jump outputs equal the masked output of the same prompt, and
    how many runs finished, next to the speed figures."""
    from cfsm.bench.decode import format_table, run_paper_character

    res = run_paper_character(engine, 1, ["fsm"], max_new_tokens=96, log=lambda *_: None)
    (row,) = res["rows"]
    assert row["masked_text"] and row["jump_text"]
    assert row["same_output"] == (row["masked_text"] == row["jump_text"])
    s = res["summary"]["fsm"]
    assert s["same_output"] == int(row["same_output"])
    assert s["finished_jump"] == int(row["jump_finished"])
    table = format_table(res)
    assert "jump output = masked" in table and f"| {s['same_output']}/1 |" in table


@pytest.mark.model
@pytest.mark.slow
@pytest.mark.skipif(
    __import__("cfsm.bench.llama_server", fromlist=["x"]).server_binary() is None,
    reason="llama-server is not built here (scripts/build_llama_server.sh, outside make test)",
)
def test_the_real_llama_server_decodes_like_the_in_process_llama_server_sampler(engine):
    """Same GGUF, prompt ids and grammar, greedy: llama.cpp's own server and the in-process
    peer that samples its way write the same text in the same number of tokens (the
    server's count without its end-of-generation token, as every row counts)."""
    from cfsm.bench.peers import PeerRunner, Task

    task = Task("yes/no (regex)", Constraint("regex", "(yes|no)"), ["Is water wet?"])
    runner = PeerRunner(engine, 16)
    try:
        a, b = "llama-server sampler", "llama-server (HTTP), grammar"
        out = {
            s: runner.generate(s, runner.compile(s, task), task, task.prompts[0]) for s in (a, b)
        }
    finally:
        runner.close()
    assert out[a] == out[b] and out[a][0] in ("yes", "no")


def test_the_figures_suite_reads_no_clear_difference_as_agreeing_with_a_tie():
    """A regex with nothing to jump: card 0%, Compare 1.01x, Doctor 1.0x all say 'no clear
    difference'; a card saying time saved while the wall time says slower disagrees."""
    from cfsm.bench.figures import agreement

    tie = {
        "card_time_saved": 0.0,
        "compare_masked_over_jump": 1.01,
        "doctor_ideal_over_masked": 1.0,
    }
    assert agreement(tie) == {"card_agrees": True, "doctor_agrees": True}
    wrong = {
        "card_time_saved": -3.97,
        "compare_masked_over_jump": 3.03,
        "doctor_ideal_over_masked": 0.86,
    }
    assert agreement(wrong) == {"card_agrees": False, "doctor_agrees": False}
    right = dict(wrong, card_time_saved=0.51, doctor_ideal_over_masked=2.2)
    assert agreement(right) == {"card_agrees": True, "doctor_agrees": True}


def test_a_wall_time_difference_within_the_runs_own_spread_is_no_clear_difference():
    """The date regex (nothing to jump), 6 runs each, measured 2026-12-06: jump's median
    0.88x of masked's, but its runs spread wider than that; the card's 0% agrees with it.
    The character preset's runs do not overlap: 2.82x is a verdict, and 0% would not agree."""
    from cfsm.bench.figures import TOLERANCE, agreement, spread

    masked = [0.13, 0.121, 0.124, 0.124, 0.152, 0.132]
    jump = [0.122, 0.128, 0.152, 0.137, 0.317, 0.156]
    noise = max(TOLERANCE, spread(masked), spread(jump))
    assert noise > 0.12  # the 0.88x ratio below is within it
    date = {
        "card_time_saved": 0.0,
        "compare_masked_over_jump": 0.88,
        "doctor_ideal_over_masked": 1.0,
        "wall_noise": noise,
    }
    assert agreement(date) == {"card_agrees": True, "doctor_agrees": True}
    assert agreement(dict(date, wall_noise=TOLERANCE))["card_agrees"] is False
    masked = [2.878, 2.941, 2.884, 2.837, 2.928, 2.894]
    jump = [1.048, 1.087, 0.991, 1.038, 1.003, 1.012]
    noise = max(TOLERANCE, spread(masked), spread(jump))
    character = dict(date, compare_masked_over_jump=2.82, wall_noise=noise)
    assert agreement(character)["card_agrees"] is False
    assert agreement(dict(character, card_time_saved=0.45))["card_agrees"] is True


@pytest.mark.model
def test_the_figures_and_busy_suites_read_each_run_they_time(engine):
    """One preset through `cfsm bench figures`' row and `cfsm bench busy`'s cell, a pair
    each: the date regex has nothing to jump, so the card's time saved is 0 and agrees
    with any wall time within the runs' noise; no card shows a negative saving."""
    from app.presets import presets
    from cfsm.bench.busy import _cell
    from cfsm.bench.figures import _preset_row

    p = presets()["Date (regex)"]
    row = _preset_row(engine, "Date (regex)", p, repeats=1)
    assert row["card_time_saved"] == 0.0 and row["runtime"] == engine.decoder.runner.name
    assert len(row["wall_s"]["masked"]) == len(row["wall_s"]["jump"]) == 1
    assert row["clock"] in ("this run", "load-time model")
    cell = _cell(engine, Constraint(p["kind"], p["text"], p["whitespace"]), p["prompt"], 1, 16)
    assert cell["card_time_saved"] == 0.0 and cell["negative_card"] is False
    assert cell["masked_s"] > 0 and cell["jump_s"] > 0


@pytest.mark.usefixtures("jsonschemabench")
def test_the_doctor_answers_real_schemas_in_one_line_each(compile_engine):
    """`cfsm bench doctor-sample` on a slice: every schema gets a report or a one-line error
    of a known kind (no crash), and the table counts them."""
    from cfsm.bench.doctor_sample import format_table, run
    from engine.errors import ErrorKind

    res = run(
        compile_engine, per_subset=3, subsets=["Github_trivial", "Glaiveai2K"], log=lambda _: None
    )
    assert res["schemas"] == 6 and "crash" not in res["answers"], res["answers"]
    assert res["answers"].get("report", 0) >= 4
    errors = [r for r in res["rows"] if r["answer"] == "error"]
    assert all(ErrorKind.of(r["kind"]) is not ErrorKind.INTERNAL for r in errors)
    reports = [r for r in res["rows"] if r["answer"] == "report"]
    assert all(r["what_ifs"] >= 1 and r["ideal_reduction"] >= 1.0 for r in reports)
    assert f"| 6 | {res['answers']['report']} |" in format_table(res)


@pytest.mark.model
def test_the_batch_suite_compares_the_same_requests_alone_and_together(
    app_server, character_regex, paper_bench
):
    """`cfsm bench batch` on a slice: the engine's batch and concurrent /v1 users against
    the same requests one at a time, each output as alone, and a pass-cost limit taken
    from the run's own measured passes."""
    from cfsm.bench.batch import V1Users, compare, engine_row, run_batch

    url, hub = app_server
    eng = hub.get()
    dec = eng.ensure_model()
    compiled = eng.compile(Constraint("regex", character_regex), "fsm").compiled
    template = paper_bench["character"]["prompt_template"]
    prompts = [template.format(name=n) for n in ("Dobby", "Hagrid")]
    rows = [engine_row(dec, compiled, prompts, "jump", 24)]
    users = V1Users(url, 2, character_regex, 24, lambda: dec.serve().counts)
    rows.append(
        compare(users.round(prompts, "masked", False), users.round(prompts, "masked", True), 2)
    )
    for r in rows:
        assert r["same_as_alone"] == "2/2" and r["tokens"][0] == r["tokens"][1] > 0
        assert r["alone_forward_s"] > 0 and r["together_forward_s"] > 0
        want = r["alone_forward_s"] / r["together_forward_s"]
        assert r["pass_cost_limit_x"] == pytest.approx(want, rel=0.01)
        # both kinds of pass ran alone and together (prompts, then one-token steps)
        assert all(ms > 0 for pair in r["ms_per_token"].values() for ms in pair), r
    one = run_batch(dec, prompts, compiled, "jump", 24)
    split = one["split"]  # the forward time, all of it, by what the passes fed
    assert split["decode_s"] + split["prefill_s"] == pytest.approx(one["forward_s"], abs=1e-3)
    assert split["decode_tokens"] >= one["batched_passes"] and split["prefill_tokens"] > 0


def test_pass_counts_split_the_forward_time_by_what_the_passes_fed():
    """A pass of one-token feeds counts as decode; one with a prompt or jumped tokens as
    prefill, its one-token feeds included; the ms a token of each, alone and together."""
    from cfsm.bench.batch import pass_split, per_token_ms
    from engine.decoding.scheduler import PassCounts

    alone, together = PassCounts(), PassCounts()
    alone.add("decode_passes", 0.014, 1, 1)
    alone.add("jump_passes", 0.05, 10, 1)
    together.add("decode_passes", 0.048, 8, 8)
    together.add("jump_passes", 0.3, 88, 8)
    together.add("prefill_passes", 0.2, 100, 2)
    assert together.forward_s == pytest.approx(0.548) and together.max_batch == 8
    assert (together.decode_passes, together.jump_passes, together.prefill_passes) == (1, 1, 1)
    assert (together.decode_tokens, together.prefill_tokens) == (8, 188)
    got = per_token_ms(pass_split(alone), pass_split(together))
    assert got == {"decode": [14.0, 6.0], "prefill": [5.0, 2.66]}
    before = pass_split(together)
    together.add("decode_passes", 0.02, 2, 2)
    assert per_token_ms(pass_split(together, before), pass_split(together, before)) == {
        "decode": [10.0, 10.0],
        "prefill": [None, None],
    }


def test_the_bitmask_suite_picks_alike_on_every_path():
    """The batched step, the per-request path it replaced and the vocabulary's last bits:
    `measure` raises when the paths pick differently."""
    from cfsm.bench.bitmask import measure

    for vocab, batch in ((33, 3), (1000, 4)):
        r = measure(vocab, batch, "cpu", reps=2)
        assert r["batched_us"] > 0 and r["per_request_us"] > 0
        assert r["xgrammar_apply_us"] is not None, r.get("xgrammar_note")


def test_bench_busy_loads_the_machine_then_stops_its_processes_and_refuses_unknown_loads():
    import psutil

    from cfsm.bench.busy import machine_load, run_busy
    from engine.errors import CfsmError
    from engine.runtimes.host_threads import usable_cpus

    me = psutil.Process()
    before = set(me.children())  # other tests' servers
    with machine_load("busy"):
        kids = set(me.children()) - before
        assert len(kids) == usable_cpus() and all(k.is_running() for k in kids)
    assert not [k for k in kids if k.is_running() and k.status() != psutil.STATUS_ZOMBIE]
    with machine_load("idle"):
        assert set(me.children()) - before == set()
    with pytest.raises(CfsmError, match="not among idle, busy, bursty"):
        run_busy(None, ["idle", "loud"], 1, 8)


def test_bench_busy_every_core_policy_pins_every_kind_and_gives_the_runtime_back():
    from types import SimpleNamespace

    from cfsm.bench.busy import thread_policy
    from engine.runtimes.pass_threads import PassThreads

    pt = PassThreads((1, 4), {"step": 1})
    eng = SimpleNamespace(decoder=SimpleNamespace(runner=SimpleNamespace(
        lm=SimpleNamespace(pass_threads=pt, threads=4))))  # fmt: skip
    with thread_policy(eng, "every core"):
        assert [pt.choose(n) for n in (1, 8, 40)] == [4, 4, 4] and not pt.explore
    assert pt.fixed == {"step": 1} and pt.explore


@pytest.mark.model
def test_bench_live_view_follows_each_run_and_changes_no_output(engine):
    """`cfsm bench live-view` on one pair per mode: every run with the page's listener drew
    at least one live view, and the outputs with and without it are the same."""
    from cfsm.bench.live_view import format_table, run

    res = run(engine, 1, log=lambda *a: None)
    assert [r["mode"] for r in res["rows"]] == ["masked", "jump"]
    for r in res["rows"]:
        assert r["same_output"], r
        assert min(r["views_per_run"]) >= 1, r  # the first step is always drawn
    assert "| masked |" in format_table(res)


def test_compare_bench_reads_a_verdict_against_the_pass_counts():
    """`cfsm bench compare`'s reading: wall time and passes pointing the same way agree;
    pointing apart, the verdict must say why ('…, but …') or the row is unexplained; equal
    passes agree only within the ratio the page lets pass unremarked."""
    from made_traces import totals

    from cfsm.bench.compare import reading

    def t(wall: float, passes: int) -> Totals:
        return totals(wall_s=wall, forward_passes=passes)

    plain = "B is 2.00x faster than A in wall time, with 3.00x fewer forward passes."
    assert reading(t(2.0, 30), t(1.0, 10), plain) == "agrees"
    assert reading(t(1.0, 30), t(2.0, 10), plain) == "unexplained"  # slower with fewer
    assert reading(t(1.0, 30), t(2.0, 10), plain[:-1] + ", but A did not finish.") == ("explained")
    assert reading(t(1.2, 10), t(1.0, 10), plain) == "agrees"
    assert reading(t(4.0, 10), t(1.0, 10), plain) == "unexplained"  # 4x on equal passes


@pytest.mark.model
def test_compare_bench_runs_presets_as_compare_does_tool_calls_included(engine):
    """Each preset picked on a fresh page and run as Compare runs it: the tools preset's
    request carries its tool calls (B jumps their forced JSON), the enum's its regex."""
    from cfsm.bench.compare import READINGS, format_table, run_compare

    res = run_compare(engine, 16, ["Enum with shared", "Tool calls, required"], log=print)
    assert [r["preset"] for r in res["rows"]] == [
        "Enum with shared prefixes (regex)",
        "Tool calls, required (tools)",
    ]
    for r in res["rows"]:
        assert re.match(r"B is [0-9.]+x (faster|slower) than A in wall time", r["verdict"]), r
        assert r["reading"] in READINGS
        assert 1 <= r["passes"][1] < r["passes"][0], r  # jump skips forced characters' passes
    assert sum(res["readings"].values()) == 2 and "| Tool calls, required" in format_table(res)
    with pytest.raises(CfsmError, match="--presets: Tool cals names no preset"):
        run_compare(engine, 16, ["Tool cals"], log=print)


@pytest.mark.model
def test_the_vocab_suite_decodes_alike_at_every_width_and_splits_host_from_forward():
    """`cfsm bench vocab` on tiny widths: the output layer is as wide as asked, the wider
    model writes the same texts (its extra rows are never allowed), every text follows the
    regex, and each row's step splits into forward and host time."""
    import re
    from types import SimpleNamespace

    from cfsm.bench.vocab import REGEX, run, table

    args = SimpleNamespace(vocab_sizes="640,8192", batch_sizes="1,2", rounds=1,
                           max_new_tokens=6, device=None)  # fmt: skip
    res = run(args, log=lambda *a: None)
    assert [(r["logits"], r["batch"]) for r in res["rows"]] == [
        (640, 1), (640, 2), (8192, 1), (8192, 2)
    ]  # fmt: skip
    assert res["same_texts_at_every_width"]
    for r in res["rows"]:
        assert len(r["texts"]) == r["batch"] and r["steps"] >= 5
        assert all(t and re.fullmatch(REGEX.replace("{400}", "*"), t) for t in r["texts"])
        assert r["host_ms_per_step"] > 0 and r["forward_ms_per_pass"] > 0
    assert all(r["sampling_ms_per_step"] > 0 and r["rest_ms_per_step"] > 0 for r in res["rows"])
    assert "| 8192 | 2 |" in table(res)


def test_the_batch_suite_reports_the_median_repeat_and_the_worst_agreement():
    """With --repeats, a row is the median round's (not the best), every round's ratio is
    kept beside it, and an output that differed from its single run in any round shows."""
    from cfsm.bench.batch import median_row, table

    runs = [
        {"throughput_x": 1.2, "alone_s": 9.0, "same_as_alone": "8/8"},
        {"throughput_x": 1.5, "alone_s": 8.0, "same_as_alone": "7/8"},
        {"throughput_x": 1.4, "alone_s": 7.0, "same_as_alone": "8/8"},
    ]
    row = median_row(runs)
    assert (row["throughput_x"], row["alone_s"]) == (1.4, 7.0)
    assert row["throughput_x_runs"] == [1.2, 1.5, 1.4] and row["same_as_alone"] == "7/8"
    assert median_row(runs[:2])["throughput_x"] == 1.2  # the lower middle of two
    res = {"runtime": "llamacpp", "device": "cpu", "max_new_tokens": 96, "rows": [
        {**row, "surface": "/v1", "mode": "jump", "size": 8, "together_s": 5.0,
         "pass_cost_limit_x": 1.45, "limit_over_achieved": 1.04}]}  # fmt: skip
    assert "| 1.4x (1.2-1.5) |" in table(res)
