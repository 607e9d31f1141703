"""The CLI: JSON outputs and, for bad input, exit code 2 with a one-line JSON error."""

import json
import subprocess
import sys

import pytest

from cfsm.cli import main


def run_cli(*args, timeout=120):
    r = subprocess.run(
        [sys.executable, "-m", "cfsm", *args], capture_output=True, text=True, timeout=timeout
    )
    return r


def test_jump_prints_continuations():
    r = run_cli("jump", "--regex", "(apple|apricot) pie", "--prefix", "", "--prefix", "apr")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout) == [
        {"prefix": "", "continuation": "ap"},
        {"prefix": "apr", "continuation": "icot pie"},
    ]


@pytest.mark.parametrize(
    "args, kind",
    [
        (["jump", "--regex", "abc", "--prefix", "x"], "prefix_outside_language"),
        (["jump", "--regex", "a(b"], "invalid_regex"),
        (["jump", "--regex", "(?<=a)b"], "unsupported_feature"),
        (["jump", "--regex", "a{100000}"], "state_explosion"),
        (
            [
                "compile",
                "--regex",
                "(a|b)*a(a|b){18}",
                "--max-states",
                "10000000",
                "--timeout",
                "2",
                "--json",
            ],
            "compile_timeout",
        ),
        (["compile", "--regex", "(a|b)*a(a|b){24}", "--json"], "state_explosion"),
        (["compile", "--schema", '{"type": "strin"}', "--json"], "invalid_schema"),
        (["compile", "--schema", "{not json", "--json"], "invalid_schema"),
        (
            [
                "compile",
                "--schema",
                '{"type": "object", "properties": {"a": {"enum": []}}, "required": ["a"]}',
                "--json",
            ],
            "unsatisfiable",
        ),
        (["compile", "--regex", "abc", "--backend", "nope", "--json"], "unknown_backend"),
        (
            ["generate", "--prompt", "x", "--tools", '[{"function": {"name": "a b"}}]', "--json"],
            "invalid_input",
        ),
        (
            ["generate", "--prompt", "x", "--tools", "/no/such/tools.json", "--json"],
            "invalid_input",
        ),
        (["generate", "--prompt", "x", "--reasoning", "--json"], "invalid_input"),
        (
            [
                "generate",
                "--prompt",
                "x",
                "--reasoning",
                "--regex",
                "a",
                "--think-budget",
                "-2",
                "--json",
            ],
            "invalid_input",
        ),
        (
            ["generate", "--regex", "a", "--prompt", "x", "--model", "nobody/nothing", "--json"],
            "unknown_model",
        ),
    ],
)
def test_errors_exit_2_with_json(args, kind):
    r = run_cli(*args)
    assert r.returncode == 2, (r.stdout, r.stderr)
    err = json.loads(r.stdout)["error"]
    assert err["kind"] == kind
    assert err["message"] and "\n" not in err["message"]
    assert "Traceback" not in r.stderr


def test_error_without_json_is_one_line_on_stderr():
    r = run_cli("compile", "--regex", "a(b")
    assert r.returncode == 2
    assert r.stderr.strip().count("\n") == 0 and "invalid_regex" in r.stderr


def test_compile_json_describes_the_automata(compile_engine, capsys):
    # in-process: reuses the session's tokenizer cache
    assert main(["compile", "--regex", r'\{"a": [0-9]+, "b": (true|false)\}', "--json"]) == 0
    rep = json.loads(capsys.readouterr().out)
    for key in (
        "num_states",
        "transitions",
        "accepting",
        "chains",
        "jumpable_states",
        "compile_seconds",
    ):
        assert key in rep
    assert {"from": 0, "string": '{"a": '}.items() <= rep["chains"][0].items()
    assert rep["backend_stats"]["token_index"]["vocab_size"] == 49152


@pytest.mark.model
def test_generate_with_tools_and_reasoning_from_flags_and_a_requests_line(engine, tmp_path, capsys):
    tools = [
        {
            "type": "function",
            "function": {
                "name": "get_time",
                "parameters": {
                    "type": "object",
                    "properties": {"city": {"type": "string", "maxLength": 20}},
                    "required": ["city"],
                },
            },
        }
    ]
    f = tmp_path / "tools.json"
    f.write_text(json.dumps(tools))
    args = [
        "generate",
        "--prompt",
        "Time in Oslo? Use a tool.",
        "--tools",
        str(f),
        "--tool-choice",
        "required",
        "--max-new-tokens",
        "40",
        "--json",
    ]
    assert main(args) == 0
    tr = json.loads(capsys.readouterr().out)
    assert tr["valid"] and tr["request"]["tool_choice"] == "required", tr["validation"]
    assert json.loads(tr["segments"][1]["text"])["name"] == "get_time"
    reqs = tmp_path / "reqs.jsonl"
    reqs.write_text(
        json.dumps(
            {
                "prompt": "Think, then say yes or no: is ice cold?",
                "regex": "(yes|no)",
                "reasoning": True,
                "think_budget": 8,
            }
        )
        + "\n"
    )
    assert main(["generate", "--requests", str(reqs), "--json"]) == 0
    line = json.loads(capsys.readouterr().out.splitlines()[0])
    assert line["valid"] and line["segments"][-1]["text"] in ("yes", "no"), line["validation"]
    assert line["segments"][1]["end"] - line["segments"][1]["start"] <= 8


@pytest.mark.model
def test_generate_requests_file(engine, tmp_path, capsys):
    f = tmp_path / "reqs.jsonl"
    f.write_text(
        json.dumps({"prompt": "Is water wet?", "regex": "(yes|no)", "mode": "jump"})
        + "\n"
        + json.dumps({"prompt": "Pick", "regex": "(?=x)", "mode": "jump"})
        + "\n"
        + json.dumps(
            {
                "prompt": "A number",
                "schema": {"type": "integer"},
                "mode": "masked",
                "max_new_tokens": 8,
            }
        )
        + "\n"
        + json.dumps(["not", "an", "object"])
        + "\n"
        + json.dumps({"prompt": "x", "regex": "a", "max_new_tokens": "many"})
        + "\n"
        + '{"prompt": "not JSON", "regex": \n'
        + json.dumps({"prompt": "Is fire hot?", "regex": "(yes|no)", "mode": "masked"})
        + "\n"
    )
    rc = main(["generate", "--requests", str(f), "--json"])
    out = capsys.readouterr()
    lines = [json.loads(x) for x in out.out.splitlines()]
    assert rc == 2 and "4 of 7 requests failed" in out.err  # the others ran
    assert len(lines) == 7 and lines[5]["error"]["kind"] == "invalid_input"
    assert lines[6]["text"] in ("yes", "no")  # the line after a bad one is answered
    assert lines[0]["text"] in ("yes", "no")  # in input order
    assert lines[1]["error"]["kind"] == "unsupported_feature"
    assert lines[2]["text"].lstrip("-").isdigit()
    assert (
        lines[3]["error"]["kind"] == lines[4]["error"]["kind"] == "invalid_input"
    )  # the run went on
    # the file's requests go to the continuous batcher (that they share passes when they
    # overlap is tested in test_serving.py; here they may not overlap in time)
    assert lines[0]["scheduler"]["kind"] == lines[2]["scheduler"]["kind"] == "continuous"


@pytest.mark.model
def test_lenient_warning_travels_to_the_trace_and_the_summary(engine, capsys):
    schema = (
        '{"type": "array", "items": {"type": "integer", "maximum": 9}, "uniqueItems": true, '
        '"maxItems": 3}'
    )
    base = [
        "generate",
        "--schema",
        schema,
        "--prompt",
        "Three digits as a JSON list",
        "--max-new-tokens",
        "16",
    ]
    assert main([*base, "--json"]) == 2
    assert json.loads(capsys.readouterr().out)["error"]["kind"] == "unsupported_feature"
    assert main([*base, "--lenient"]) == 0
    err = capsys.readouterr().err
    assert "WARNING: `uniqueItems` at /uniqueItems is NOT enforced" in err
    assert main([*base, "--lenient", "--json"]) == 0
    tr = json.loads(capsys.readouterr().out)
    assert tr["warnings"] and "uniqueItems" in tr["warnings"][0]
    assert tr["compile"]["warnings"] == tr["warnings"]
    assert all(0 <= x <= 9 for x in json.loads(tr["text"]))  # what is enforced still holds


def test_run_summary_on_the_page_shows_warnings():
    from made_traces import trace as made_trace

    from viz.summaries import summary_md

    totals = {
        "output_tokens": 1,
        "forward_passes": 1,
        "wall_s": 0.1,
        "tokens_per_s": 10,
        "jumps": 0,
        "jumped_chars": 0,
        "finished": True,
        "reason": "complete",
    }
    md = summary_md(
        made_trace(
            totals=totals,
            valid=True,
            validation="ok",
            warnings=["`uniqueItems` at /uniqueItems is NOT enforced: x"],
        )
    )
    assert "warning" in md and "uniqueItems" in md and "Spec reading" not in md
    spec = summary_md(
        made_trace(
            totals=totals,
            valid=True,
            validation="ok",
            request={"constraint": {"kind": "schema", "text": "{}", "spec": True}},
        )
    )
    assert "Spec reading" in spec


@pytest.mark.usefixtures("paper_bench")
def test_bench_peers_prints_one_json_line_with_a_row_per_system_and_task(tmp_path):
    out = tmp_path / "peers.json"
    r = run_cli(
        "bench",
        "--suite",
        "peers",
        "--names",
        "1",
        "--max-new-tokens",
        "8",
        "--json",
        "--out",
        str(out),
        timeout=600,
    )
    assert r.returncode == 0, r.stderr[-2000:]
    lines = [ln for ln in r.stdout.splitlines() if ln.strip()]
    assert len(lines) == 1
    res = json.loads(lines[0])
    from cfsm.bench.llama_server import server_binary
    from cfsm.bench.peers import HTTP_PEERS, NOT_COMPACT, SYSTEMS

    systems = [s for s in SYSTEMS if server_binary() or s not in HTTP_PEERS]
    assert "llama-server sampler" in systems and "cfsm jump (llama.cpp)" in systems
    regex_rows = [s for s in systems if s not in NOT_COMPACT]  # no JSON whitespace in a regex
    assert [row["system"] for row in res["rows"]] == regex_rows + systems * 2
    assert {row["task"] for row in res["rows"]} == {
        "character (regex)",
        "person (compact object)",
        "order (arrays and enums)",
    }
    for row in res["rows"]:
        assert {
            "system",
            "task",
            "wall_s",
            "output_tokens",
            "valid",
            "runs",
            "compile_s",
            "tokens_per_s",
        } <= set(row)
        assert row["runs"] == 1 and 0 <= row["valid"] <= 1
        assert (
            row["output_tokens"] <= 8 or row["system"] == "outlines"
        )  # outlines: its text re-tokenized
    assert json.loads(out.read_text()) == res and out.with_suffix(".html").exists()
    assert all(v > 0 for v in res["compile"]["seconds"].values())


def test_bench_is_one_subcommand_per_registered_suite_and_the_old_spelling_still_works():
    """`cfsm bench NAME` comes from the registry; `--suite NAME` and a bare `cfsm bench`
    (the default suite) read the same; a suite takes its own flags, not another's."""
    from cfsm.bench import DEFAULT_SUITE, SUITES
    from cfsm.cli import bench_argv, build_parser

    assert {"kv-pressure", "check-requests", "paper-character", "conformance"} <= set(SUITES)
    parser = build_parser()
    for name, suite in SUITES.items():
        args = parser.parse_args(bench_argv(["bench", "--suite", name, "--out", "x.json"]))
        assert args.suite_obj is suite and args.out == "x.json"
        assert parser.parse_args(["bench", name]).suite_obj is suite
    assert bench_argv(["bench", "--names", "2"]) == ["bench", DEFAULT_SUITE, "--names", "2"]
    old = bench_argv(["bench", "--names", "2", "--suite=batch"])
    assert old == ["bench", "batch", "--names", "2"]
    args = parser.parse_args(["bench", "peers", "--names", "3"])
    assert args.names == 3 and args.max_new_tokens == 256 and args.model is None
    r = run_cli("bench", "conformance", "--names", "3")
    assert r.returncode == 2 and "unrecognized arguments: --names" in r.stderr


@pytest.mark.usefixtures("jsonschemabench")
def test_bench_writes_a_suites_results_json_and_table_one_way(tmp_path):
    """A real (small) suite through the CLI: the results JSON at --out, the HTML report
    beside it, the table and both paths on stdout; --json prints the suite's summary."""
    out = tmp_path / "jsb.json"
    args = ("bench", "jsonschemabench", "--per-subset", "1", "--backends", "xgrammar")
    args += ("--subsets", "Github_trivial,Kubernetes,JME")
    r = run_cli(*args, "--out", str(out), timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    res = json.loads(out.read_text())
    assert [row["subset"] for row in res["rows"]][:1] == ["Github_trivial"]
    assert "| xgrammar |" in r.stdout and f"results: {out}; report: " in r.stdout
    assert "xgrammar" in out.with_suffix(".html").read_text()
    r = run_cli(*args, "--out", str(tmp_path / "again.json"), "--json", timeout=300)
    summary = json.loads(r.stdout)
    assert "rows" not in summary and summary["schemas"] == res["schemas"] == 3
    assert summary["summary"]["xgrammar"]["compiled"] == res["summary"]["xgrammar"]["compiled"]


def test_output_into_a_closed_pipe_ends_quietly():
    """`cfsm compile ... | head`: the reader leaves after a few bytes of a 700 KB answer;
    the command ends without a traceback (exit 0, the reader has what it asked for)."""
    p = subprocess.Popen(
        [sys.executable, "-m", "cfsm", "compile", "--regex", "[a-z]{1,3000}x", "--json"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert p.stdout.read(20).startswith(b'{"constraint"')
    p.stdout.close()
    err = p.stderr.read().decode()
    assert p.wait(timeout=120) == 0 and "Traceback" not in err and "BrokenPipe" not in err, err
