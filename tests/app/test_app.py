"""The page's helpers, without a browser: what Compare, upload and live validation say."""

import gradio as gr
from made_traces import trace as made_trace

from app.checks import live_check
from app.inputs import RESTORED_INPUTS, restore_inputs
from app.run import scrub_slider
from engine.constraint import Constraint
from engine.errors import CfsmError
from viz.summaries import compare_md


def _run(text: str, wall: float, passes: int, finished: bool = True, reason: str = "complete"):
    totals = dict(wall_s=wall, forward_passes=passes, output_tokens=10, finished=finished)
    return made_trace(text=text, totals={**totals, "reason": reason})


def test_compare_states_the_ratio_plainly_when_both_runs_are_alike():
    md = compare_md(_run("ab", 2.0, 10), _run("ab", 1.0, 4), "masked / fsm", "jump / fsm", 0.0, 0)
    assert "B is 2.00x faster than A in wall time, with 2.50x fewer forward passes.**" in md
    assert "care" not in md


def test_compare_warns_when_a_run_did_not_finish_or_outputs_differ_or_were_sampled():
    md = compare_md(
        _run("abc", 20.6, 10, False, "max_new_tokens"), _run("ab", 1.0, 4), "A", "B", 0.7, 3
    )
    assert "A did not finish (max_new_tokens)" in md
    assert "the outputs differ" in md
    assert "temperature 0.7, seed 3" in md and "read the ratio with care" in md


def test_compare_explains_a_big_ratio_with_equal_passes():
    """Issue 46: "B is 44.2x faster than A ... with 1.00x fewer forward passes" for
    `(yes|no)`: B had reused the prompt A had just prefilled."""
    a, b = _run("yes", 0.63, 1), _run("yes", 0.014, 1)
    a.totals.prompt_cached_tokens, b.totals.prompt_cached_tokens = 0, 30
    md = compare_md(a, b, "masked / fsm", "jump / fsm", 0.0, 0)
    assert "took more of its prompt from the cache (0 against 30 tokens)" in md
    assert "read the ratio with care" in md and "| prompt tokens from the cache | 0 | 30 |" in md
    a.totals.prompt_cached_tokens = 30
    md = compare_md(a, b, "masked / fsm", "jump / fsm", 0.0, 0)
    assert "the machine was busier during one of the runs" in md
    near = compare_md(_run("yes", 0.02, 1), _run("yes", 0.014, 1), "A", "B", 0.0, 0)
    assert "care" not in near  # 1.4x with equal passes: nothing to explain
    a, b = _run("ab", 2.0, 10), _run("ab", 1.0, 4)  # passes explain the ratio, not the cache
    a.totals.prompt_cached_tokens, b.totals.prompt_cached_tokens = 8, 53
    md = compare_md(a, b, "A", "B", 0.0, 0)
    assert "A took 8 prompt tokens from the cache and B 53" in md and "with care" in md


def test_compare_says_when_the_side_with_fewer_passes_took_longer():
    """`cfsm bench compare` under load: "B is 1.13x slower than A in wall time, with 1.07x
    fewer forward passes", and nothing said why (the flexible-whitespace preset)."""
    a, b = _run("ab", 1.90, 86), _run("ab", 2.15, 80)
    md = compare_md(a, b, "masked / fsm", "jump / fsm", 0.0, 0)
    assert "B is 1.13x slower" in md and "B made fewer forward passes yet took longer" in md
    assert "read the ratio with care" in md
    md = compare_md(_run("ab", 2.15, 80), _run("ab", 1.90, 86), "A", "B", 0.0, 0)
    assert "A made fewer forward passes yet took longer" in md
    agree = compare_md(_run("ab", 2.0, 86), _run("ab", 1.9, 80), "A", "B", 0.0, 0)
    assert "yet took longer" not in agree and "care" not in agree


def test_an_uploaded_trace_restores_its_inputs():
    trace = made_trace(
        backend="xgrammar",
        mode="masked",
        request={
            "prompt": "Hi",
            "max_new_tokens": 64,
            "temperature": 0.5,
            "top_p": 0.9,
            "seed": 7,
            "runtime": "transformers",
            "constraint": {
                "kind": "schema",
                "text": "{}",
                "whitespace": "spaced",
                "lenient": True,
                "spec": True,
            },
        },
    )
    got = restore_inputs(trace)
    assert {
        k: got[k] for k in ("kind", "sch", "prompt", "ws", "lenient", "spec", "backend", "mode")
    } == {
        "kind": "schema",
        "sch": "{}",
        "prompt": "Hi",
        "ws": "spaced",
        "lenient": True,
        "spec": True,
        "backend": "xgrammar",
        "mode": "masked",
    }
    assert (got["max_new"], got["temp"], got["top_p"], got["seed"]) == (64, 0.5, 0.9, 7)
    assert got["runtime"] == "transformers"
    assert got["preset"] == "(edited: no preset)"  # the inputs are the trace's, not a preset's
    # the other two constraint boxes keep what they hold
    row = RESTORED_INPUTS.set(**got)
    assert isinstance(row[RESTORED_INPUTS.names.index("rx")], type(gr.skip()))
    assert isinstance(row[RESTORED_INPUTS.names.index("gram")], type(gr.skip()))


def test_inputs_from_outside_are_checked_against_their_widgets():
    from app.inputs import checked_inputs

    got = checked_inputs(
        {"ws": "loose", "mode": "jump", "runtime": "vllm", "top_p": "0.9", "temp": 9, "seed": "x"}
    )
    assert got == {"mode": "jump", "top_p": 0.9, "temp": 2}


def test_a_free_run_upload_keeps_the_constraint_inputs():
    out = restore_inputs(
        made_trace(backend=None, mode="free", request={"prompt": "x", "constraint": None})
    )
    assert "kind" not in out and "rx" not in out and out["mode"] == "free"


def test_grammar_live_validation_parses_with_the_chosen_backend_and_hides_source_paths():
    bad = live_check("grammar", 'root ::= "a" |', "compact", "xgrammar")
    assert "invalid_grammar" in bad and "EBNF parser error" in bad
    assert ".cc" not in bad and "/project" not in bad
    assert "Expect element, but got the end of the grammar" in bad  # not a bare "but got"
    assert "looks valid" in live_check("grammar", 'root ::= "a" | "b"', "compact", "xgrammar")
    assert "unknown name" in live_check("grammar", "start: foo", "compact", "llguidance")
    # fsm takes no grammar: the message says which backends do
    note = live_check("grammar", 'root ::= "a"', "compact", "fsm")
    assert "takes no grammars" in note and "xgrammar" in note


def test_the_scrubber_covers_every_step_and_the_end():
    assert (scrub_slider(0).maximum, scrub_slider(0).interactive) == (1, False)
    assert (scrub_slider(1).maximum, scrub_slider(1).interactive) == (1, True)
    assert scrub_slider(39).maximum == 39


def test_compare_reads_a_slower_b_the_right_way_round_and_says_why_outputs_differ():
    """B took 62.9 s and 196 passes against A's 3.8 s and 18: 'B is 16.6x slower ... with
    10.9x more forward passes', never '0.06x slower ... 0.09x fewer'; masked and jump outputs
    that differ come with the reason they can."""
    a, b = _run("short", 3.8, 18), _run("long and repeating", 62.9, 196, False, "max_new_tokens")
    a.mode, b.mode = "masked", "jump"
    md = compare_md(a, b, "masked / fsm", "jump / fsm", 0.0, 0)
    assert "B is 16.6x slower than A in wall time, with 10.9x more forward passes" in md
    assert "0.06x" not in md and "0.09x" not in md
    assert "B did not finish (max_new_tokens)" in md
    assert "re-tokenizes what it jumps" in md


def test_the_regex_live_check_names_a_state_explosion_before_run(compile_engine):
    """With the engine loaded, typing a regex builds its automaton in the live check's own
    worker: a state explosion is named in the box's message, an ordinary regex gets its
    state count, and with no engine loaded yet the check stays as cheap as before."""
    from app.state import EngineHub

    hub = EngineHub()
    hub._engines[hub.default] = compile_engine  # loaded, as the server's hub holds it
    bad = live_check("regex", "(a|b)*a(a|b){24}", "compact", "fsm", hub)
    assert "state_explosion" in bad and "10000 DFA states" in bad
    assert "looks valid: 5 automaton states" in live_check(
        "regex", "(yes|no)", "compact", "fsm", hub
    )
    assert live_check("regex", "(a|b)*a(a|b){24}", "compact", "fsm", EngineHub()).endswith(
        "\u2713 looks valid</div>"
    )  # nothing loaded: no automaton is built


def test_an_uploaded_triggered_trace_restores_the_tools_tab_and_reasoning():
    tools = '[{"type": "function", "function": {"name": "f"}}]'
    trace = made_trace(
        backend="fsm",
        mode="jump",
        request={
            "prompt": "Hi",
            "constraint": None,
            "tools": tools,
            "tool_choice": "required",
            "tool_start": "```json\n",
            "tool_end": "\n```",
            "reasoning": True,
            "think_budget": 12,
        },
    )
    got = restore_inputs(trace)
    assert got["kind"] == "tools" and got["tools"] == tools
    assert (got["tool_choice"], got["tool_start"], got["tool_end"]) == (
        "required",
        "```json\n",
        "\n```",
    )
    assert got["reasoning"] is True and got["think_budget"] == 12
    RESTORED_INPUTS.set(**got)  # every restored input is a widget the upload writes


def test_the_tools_box_says_what_it_holds_or_what_is_wrong():
    from app.checks import tools_check

    assert "2 tools: f, g" in tools_check(
        '[{"function": {"name": "f"}}, {"function": {"name": "g"}}]'
    )
    bad = tools_check('[{"function": {"name": "f", "parameters": {"type": "nope"}}}]')
    assert 'id="error-box"' in bad and "tool &#x27;f&#x27;" in bad and "invalid JSON schema" in bad
    assert tools_check("") == ""


def test_a_permalink_carries_the_trigger_inputs():
    import urllib.parse

    from app.inputs import PageInputs

    md = PageInputs(
        kind="tools",
        tools="[]",
        prompt="p",
        model="embedded",
        max_new=64,
        reasoning=True,
        think_budget=8,
        tool_choice="required",
        tool_start="<tool_call>",
        tool_end="</tool_call>",
    ).permalink()
    q = dict(urllib.parse.parse_qsl(md[md.index("?") + 1 : md.rindex(")")]))
    assert q["kind"] == "tools" and q["reasoning"] == "1" and q["budget"] == "8"
    assert (q["choice"], q["tstart"], q["tend"]) == ("required", "<tool_call>", "</tool_call>")


def test_the_trigger_presets_set_their_tab_and_controls():
    from app.inputs import PRESET_INPUTS, trigger_inputs
    from app.presets import presets

    P = presets()
    r = P["Reasoning, then JSON (thinking budget)"]
    assert r["reasoning"] and r["think_budget"] > 0 and r["kind"] == "schema"
    auto, req = P["Tool calls, auto (tools)"], P["Tool calls, required (tools)"]
    assert (auto["kind"], auto["tool_choice"], req["tool_choice"]) == ("tools", "auto", "required")
    got = trigger_inputs(None, req.get("tool_choice"), None, None, False, None)
    assert got["tool_start"] == "<tool_call>" and got["reasoning"] is False
    PRESET_INPUTS.set(**got)


def _is_skip(v) -> bool:
    return isinstance(v, dict) and v.get("__type__") == "update" and len(v) == 1


def test_stop_after_the_decode_sends_what_the_finished_run_had_left_to_send():
    """Stop cancels the run's event; once the decode is over that only cuts off the
    updates still to come, so Stop sends them: the view keeps every position, and the
    trace offered for download is the finished run's."""
    import json

    from app.run import STOP_OUTPUTS, finished_run, stop_reply
    from app.state import RunHandle
    from cfsm.bench.scrub import synthetic_trace

    done = synthetic_trace(r"[a-z0-9]{1,2000}", steps=6)
    first, rest = finished_run(done, True, False)
    h = RunHandle()
    h.set_phase("done")
    h.unsent = (done, rest)
    got = dict(zip(STOP_OUTPUTS.names, stop_reply(h, done, True, False, False), strict=True))
    assert got["view_rest"] == rest and 'data-run="' in rest
    assert json.loads(open(got["dl_trace"], encoding="utf-8").read())["text"] == done.text
    assert list(got["timeline"].data[0].x) == [s.index for s in done.steps]
    assert all(_is_skip(got[k]) for k in ("view", "summary", "live"))  # the view shown stays
    # every update was sent: Stop has nothing to add
    h.unsent = None
    got = dict(zip(STOP_OUTPUTS.names, stop_reply(h, done, True, False, False), strict=True))
    assert all(_is_skip(v) for v in got.values())


def test_stop_while_decoding_brings_back_the_previous_runs_view():
    from app.run import STOP_OUTPUTS, stop_reply
    from app.state import RunHandle
    from cfsm.bench.scrub import synthetic_trace
    from viz.cards import stat_cards

    prev = synthetic_trace("(yes|no)", steps=1)
    h = RunHandle()
    h.set_phase("decoding")
    got = dict(zip(STOP_OUTPUTS.names, stop_reply(h, prev, True, False, False), strict=True))
    assert got["stop_msg"].startswith("Stopped after") and h.event.is_set()
    assert 'id="step-view"' in got["view"] and "previous run's" in got["summary"]
    assert got["live"] == "" and _is_skip(got["view_rest"]) and _is_skip(got["dl_trace"])
    # the figures are the shown run's, not the stopped run's streamed ones
    assert got["cards"] == stat_cards(prev.totals) and got["cards"]
    h2 = RunHandle()
    h2.set_phase("decoding")
    first = dict(zip(STOP_OUTPUTS.names, stop_reply(h2, None, True, False, False), strict=True))
    assert first["cards"] == "" and "previous run's" not in first["summary"]


def test_a_run_waiting_for_kv_cells_says_so_in_the_status_line():
    """A held pass streams a wait event: the status line says the run waits, how many
    requests go first and what it will compute again, instead of a frozen step count."""
    from app.run import live_update
    from engine.decoding.trace import WaitEvent

    out = live_update(WaitEvent(held_passes=4, ahead=2, recomputed_tokens=0))
    assert set(out) == {"summary"}  # the token strip and cards keep the last step's
    assert out["summary"].startswith("Waiting for the model's KV cache")
    assert "2 requests ahead of this one, held 4 passes so far." in out["summary"]
    again = live_update(WaitEvent(held_passes=1, ahead=1, recomputed_tokens=180))["summary"]
    assert "1 request ahead" in again and "180 tokens to compute again" in again


def test_a_permalink_round_trips_every_control_it_carries():
    """PageInputs -> permalink -> the page's load: every control the link restores comes
    back with its value (schema with Lenient and Spec reading included)."""
    import urllib.parse

    from app.inputs import PERMALINK_INPUTS, PageInputs, permalink_inputs

    inp = PageInputs(
        kind="schema",
        sch='{"type": "integer"}',
        ws="spaced",
        prompt="a number",
        model="my/model",
        backend="xgrammar",
        mode="masked",
        max_new=77,
        temp=0.7,
        top_p=0.9,
        seed=5,
        lenient=True,
        spec=True,
        runtime="transformers",
        reasoning=True,
        think_budget=12,
        trigger_impl="engine",
    )
    md = inp.permalink()
    q = dict(urllib.parse.parse_qsl(md[md.index("?") + 1 : md.rindex(")")]))
    back = permalink_inputs(q)
    assert set(back) - {"ctabs", "preset"} <= set(PERMALINK_INPUTS.names)
    for name in ("kind", "sch", "ws", "prompt", "model", "backend", "mode", "lenient", "spec",
                 "runtime", "reasoning", "think_budget", "trigger_impl"):  # fmt: skip
        assert back[name] == getattr(inp, name), name
    for name in ("max_new", "temp", "top_p", "seed"):
        assert float(back[name]) == float(getattr(inp, name)), name


def test_page_inputs_build_the_runs_request_and_constraint():
    from app.inputs import PageInputs

    inp = PageInputs(kind="regex", rx="(yes|no)", prompt="Wet?", mode="masked", max_new=9)
    req = inp.request()
    assert req.constraint.text == "(yes|no)" and req.mode == "masked"
    assert req.max_new_tokens == 9 and req.prompt == "Wet?"
    assert PageInputs(kind="tools", tools="[]").run_constraint() is None
    assert PageInputs(kind="regex", rx="a", mode="free").run_constraint() is None


def test_compare_shows_outputs_as_text_with_their_first_difference_marked():
    """Text, not Python reprs: a newline is a glyph, not `\\n`, and two outputs that share a
    long start show where they part, not two identical cut prefixes."""
    shared = '{"name": "Harry",\n "city": "'
    a, b = _run(shared + 'London"}', 1.0, 4), _run(shared + 'Paris"}', 1.0, 4)
    md = compare_md(a, b, "A", "B", 0.0, 0)
    row = next(line for line in md.splitlines() if line.startswith("| output |"))
    assert "\\n" not in row and "\u21b5" in row  # the newline as a glyph, in the text
    assert row.count("▶") == 2 and '**`London"}`**' in row and '**`Paris"}`**' in row
    assert f"from character {len(shared)} on" in md
    same = compare_md(_run("a|b`c", 1.0, 4), _run("a|b`c", 1.0, 4), "A", "B", 0.0, 0)
    out = next(line for line in same.splitlines() if line.startswith("| output |"))
    assert out.count(" | ") == 2 and "▶" not in out  # a bar in the text does not split the row


def test_the_real_schema_presets_compile_on_fsm_and_place_their_states(
    compile_engine, jsonschemabench
):
    """The two real-world presets (a 54-property shipment, a function's arguments with a
    date-time): auto keeps them on fsm (the automaton the page draws), a valid MaskBench
    instance of each walks through, and the drawn states are placed in the schema's own
    properties (the outline the graph is clustered by)."""
    import json

    from app.presets import REAL_SCHEMAS, presets
    from cfsm.bench.jsonschemabench import DATA, walk_instance
    from engine.constraint import Constraint
    from engine.schema import dump_as_generated
    from engine.schema.places import places_for_view

    got = {n: p for n, p in presets().items() if n in REAL_SCHEMAS}
    assert len(got) == 2
    ctx, placed = compile_engine.ctx, {}
    for name, p in got.items():
        c = Constraint("schema", p["text"], p["whitespace"])
        res = compile_engine.cache.get(c, "auto")
        assert res.backend == "fsm", (name, res.why)
        record = json.loads((DATA / "maskbench" / REAL_SCHEMAS[name]["file"]).read_text())
        doc = next(t["data"] for t in record["tests"] if t["valid"])
        text = dump_as_generated(doc, json.loads(p["text"]))
        assert walk_instance(res.compiled, ctx.tokenizer, ctx.vocab.token_bytes, text)["accepted"]
        placed[name] = {q for ps in places_for_view(res.dfa, p["text"]).values() for q in ps}
    ship, health = placed.values()
    assert "/properties/shipment/properties/carrier" in ship
    assert "/properties/data/items/properties/timestamp" in health


def _engine_messages() -> list[str]:
    """Every string literal in engine/ that is not a docstring: the messages it can send."""
    import ast
    from pathlib import Path

    out = []
    for f in sorted((Path(__file__).resolve().parents[2] / "engine").rglob("*.py")):
        tree = ast.parse(f.read_text(encoding="utf-8"))
        docs = {
            id(n.body[0].value)
            for n in ast.walk(tree)
            if isinstance(n, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
            and n.body
            and isinstance(n.body[0], ast.Expr)
        }
        out += [
            n.value
            for n in ast.walk(tree)
            if isinstance(n, ast.Constant) and isinstance(n.value, str) and id(n) not in docs
        ]
    return out


def test_messages_on_the_page_name_its_controls_not_cli_flags():
    """Issue 46: errors on the page said `--lenient`; every CLI flag the engine names in a
    message is named as the page's control, or is one the page never shows."""
    import re

    from app.checks import CLI_ONLY, error_line, for_the_page
    from app.doctor import page_report
    from engine.errors import CfsmError

    flagged = [m for m in _engine_messages() if re.search(r"--[a-z]", m)]
    assert len(flagged) >= 6  # the lenient, spec and runtime messages at least
    left = {
        flag
        for m in flagged
        for flag in re.findall(r"--[a-z][a-z-]*(?![a-z-])(?! to the CLI)", for_the_page(m))
    }
    left.discard("--no-deps")  # pip's own flag, in a command to run: "pip install --no-deps"
    assert left <= set(CLI_ONLY), left - set(CLI_ONLY)
    shown = error_line(CfsmError("unsupported_runtime", "no libllama; use --runtime transformers"))
    assert "set the Runtime menu to transformers" in shown and "--" not in shown
    row = {"change": "JSON Schema's own reading (--spec: open objects, 1.0 as an integer)"}
    (w,) = page_report({"what_if": [row]})["what_if"]
    assert (
        w["change"]
        == "JSON Schema's own reading (the Spec reading box: open objects, 1.0 as an integer)"
    )


def test_the_schema_live_check_names_the_backend_run_will_use(compile_engine):
    """A tick was shown for schemas Run then refused or moved off fsm after its 8 s: the
    check now builds fsm's automaton in the live worker (a refusal there is cached as
    Run's own) and names the backend `auto` runs the schema on."""
    import json

    from app.state import EngineHub

    hub = EngineHub()
    hub._engines[hub.default] = compile_engine
    person = json.dumps({"type": "object", "properties": {"name": {"type": "string"}},
                         "required": ["name"]})  # fmt: skip
    ok = live_check("schema", person, "compact", "auto", hub)
    assert "\u2713 valid schema:" in ok and "auto runs it on fsm" in ok
    wide = json.dumps({"type": "object", "properties": {f"p{i}": {"type": "string"}
                       for i in range(700)}})  # fmt: skip
    compile_engine.cache.wait_ready()  # a served page's workers are set up at start
    moved = live_check("schema", wide, "compact", "auto", hub)
    # the native compile is waited for up to LIVE_CHECK_S; past it the check says so
    assert "fsm cannot hold it" in moved and (
        "auto runs it on llguidance" in moved or "llguidance is still compiling it" in moved
    )
    # and Run does what the check said
    assert (
        compile_engine.compile(Constraint.from_inputs("schema", wide, "compact"), "auto").backend
        == "llguidance"
    )
    refused = live_check("schema", wide, "compact", "fsm", hub)
    assert "state_explosion" in refused and "\u2713" not in refused
    one_of = json.dumps({"oneOf": [{"type": "string"}, {"type": "string", "maxLength": 3}]})
    for text in (person, one_of):
        said = live_check("schema", text, "compact", "auto", hub)
        if "still compiling" in said:  # past LIVE_CHECK_S on a busy machine: said so
            continue
        try:
            got = compile_engine.compile(Constraint.from_inputs("schema", text, "compact"), "auto")
        except CfsmError as exc:  # refused by Run: the check showed the refusal, no tick
            assert "\u2713" not in said and exc.kind in said, said
        else:
            assert "\u2713" in said and f"runs it on {got.backend}" in said, (said, got.backend)


def test_a_runs_summary_names_the_pages_controls_not_cli_flags():
    """auto's reason quotes a backend's refusal ("--lenient compiles it unenforced"): on
    the page that is the Lenient box."""
    from app.run import finished_run

    tr = made_trace(backend="llguidance", mode="jump")
    tr.backend_why = (
        "llguidance, because fsm refused it (`uniqueItems` at /uniqueItems cannot be enforced "
        "on the regex path (--lenient compiles it unenforced with a warning))"
    )
    first, _ = finished_run(tr, True, False)
    assert "the Lenient box compiles it" in first["summary"]
    assert "--lenient" not in first["summary"]
