"""`cfsm`: jump, compile, generate, bench, doctor, serve. Bad input exits 2 with a
one-line message (a JSON error object on stdout with --json), never a traceback."""

from __future__ import annotations

import argparse
import concurrent.futures as cf
import json
import os
import sys
from pathlib import Path

from engine.analysis.check import check_text
from engine.backends import BACKENDS, DEFAULT_BACKEND
from engine.constraint import KINDS, Constraint
from engine.decoding.request import GenerateRequest, offered_on
from engine.decoding.trace import Trace
from engine.errors import CfsmError, internal_error
from engine.lazy import lazy_module
from engine.limits import COMPILE_TIMEOUT_S, MAX_SCHEMA_CHARS, MAX_STATES
from engine.regex.compressed import CompressedFSM
from engine.regex.dfa import build_char_dfa
from viz.doctor_text import format_report
from viz.summaries import skipped_jumps_line

from .arguments import (
    add_constraint_args,
    add_model_args,
    add_optional_constraint_args,
    add_request_args,
    add_runtime_arg,
    load_schema_arg,
)
from .batches import BatchTally, line_error, read_jsonl, read_user_file, windows
from .bench import DEFAULT_SUITE, SUITES
from .bench.suite import open_engine, write_results

app_main = lazy_module("app.main")  # the page: gradio takes seconds to import; `cfsm serve` only


def _engine(args, **kw):
    """The engine the model flags ask for (--model, --device, --trust-remote-code,
    --runtime)."""

    return open_engine(args, **kw)


def _constraint_from(args, obj: dict | None = None):
    """--regex / --schema (a path or inline JSON) / --grammar (a path or inline text), or
    the same fields of a requests line; None when none is given."""

    src = obj if obj is not None else vars(args)
    kind = next((k for k in KINDS if src.get(k) is not None), None)
    if kind is None:
        return None
    text = src[kind]
    if kind == "schema":
        text = json.dumps(text) if isinstance(text, (dict, bool)) else load_schema_arg(text)
    elif (
        kind == "grammar"
        and isinstance(text, str)
        and "\n" not in text
        and len(text) < 4096
        and Path(text).is_file()
    ):
        text = Path(text).read_text(encoding="utf-8")
    lenient = src.get("lenient", getattr(args, "lenient", False))
    spec = src.get("spec", getattr(args, "spec", False))
    return Constraint.from_inputs(
        kind, text, src.get("whitespace"), lenient, spec, require_text=False
    )


def cmd_jump(args) -> int:
    cfsm = CompressedFSM(build_char_dfa(args.regex))
    out = [{"prefix": p, "continuation": cfsm.continuation(p)} for p in (args.prefix or [""])]
    print(json.dumps(out, ensure_ascii=False))
    return 0


def cmd_compile(args) -> int:
    constraint = _constraint_from(args)
    eng = _engine(
        args,
        load_weights=False,
        max_states=args.max_states,
        compile_timeout_s=args.timeout,
    )
    try:
        rep = eng.compile_report(constraint, args.backend)
    finally:
        eng.close()
    if args.json:
        print(json.dumps(rep, ensure_ascii=False))
    else:
        st = rep.get("stats", {})
        print(f"backend {rep['backend']}: compiled in {rep['compile_seconds']} s")
        if rep.get("backend_why"):
            print(f"chosen by auto: {rep['backend_why']}")
        if st:
            print(
                f"DFA states {st['num_states']}, jumpable {st['jumpable_states']} "
                f"({st['jumpable_share']:.0%}), chains {st['num_chains']}, longest chain "
                f"{st['longest_chain']} chars"
            )
            for c in rep["chains"][:20]:
                print(f"  {c['from']:>4} -> {c['to']:<4} {c['string']!r}")
    return 0


REQUEST_FIELDS = tuple(offered_on("cli"))  # a requests line's keys, as the flags'


def _tools_text(value) -> str | None:
    """--tools takes a file or inline JSON; a requests line may hold the list itself."""
    if value is None or isinstance(value, (list, dict)):
        return None if value is None else json.dumps(value, ensure_ascii=False)
    text = str(value)
    if text.strip()[:1] in ("[", "{", "") or len(text) >= 4096:
        return text
    try:
        p = Path(text)
        if not p.is_file():
            raise CfsmError("invalid_input", f"--tools {text!r} is neither JSON nor a file")
        if p.stat().st_size > MAX_SCHEMA_CHARS:
            raise CfsmError(
                "input_too_large", f"tools file {text} is larger than {MAX_SCHEMA_CHARS} bytes"
            )
        return p.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise CfsmError("invalid_input", f"cannot read the tools file: {exc}") from None


def _request_from(obj: dict, args):
    """A requests line (or the flags, as a dict) as a validated GenerateRequest."""

    if not isinstance(obj, dict):
        raise CfsmError(
            "invalid_input", f"a request must be a JSON object, not {type(obj).__name__}"
        )
    inputs = {k: obj[k] for k in REQUEST_FIELDS if k in obj}
    if "tools" in inputs:
        inputs["tools"] = _tools_text(inputs["tools"])
    return GenerateRequest.from_inputs(obj.get("prompt", ""), _constraint_from(None, obj), **inputs)


def _generate_many(lines, args) -> int:
    """The requests of a JSONL file decode in one continuous batch, REQUESTS_WINDOW lines
    at a time (bounded memory on a file of any length); results are printed in input
    order, one line each (an error object where a request fails, and the file goes on)."""

    eng = _engine(args, continuous=True)

    def one(obj) -> dict:
        try:
            if isinstance(obj, CfsmError):
                raise obj
            tr = eng.generate(_request_from(obj, args)).to_json()
            return tr if args.json else {k: tr[k] for k in ("text", "totals", "valid")}
        except Exception as exc:  # noqa: BLE001 - one line's failure is that line's answer
            return line_error(exc)

    def compile_first(window: list) -> None:
        """One at a time: queueing for the compile pool is no timeout."""
        for obj in window:
            try:
                req = _request_from(obj, args)
                if req.constraint is not None and req.mode != "free":
                    eng.compile(req.constraint, req.backend)
            except Exception:  # noqa: BLE001 - reported by its own line below
                pass

    tally = BatchTally()
    try:
        with cf.ThreadPoolExecutor(max_workers=16, thread_name_prefix="cfsm-request") as pool:
            for window in windows(lines):
                compile_first(window)
                for out in pool.map(one, window):
                    print(json.dumps(tally.record(out), ensure_ascii=False), flush=True)
    finally:
        eng.close()
    return tally.exit_code("requests")


def cmd_generate(args) -> int:
    if args.requests:
        return _generate_many(read_jsonl(args.requests), args)
    if args.prompt is None:
        raise CfsmError("invalid_input", "--prompt is required (or --requests FILE.jsonl)")
    fields = ("prompt", *KINDS, "whitespace", *REQUEST_FIELDS, "lenient", "spec")
    obj = {k: getattr(args, k) for k in fields}
    req = _request_from(obj, args)
    eng = _engine(args)
    try:
        tr = eng.generate(req)
    finally:
        eng.close()
    if args.json:
        print(json.dumps(tr.to_json(), ensure_ascii=False))
    else:
        print(tr.text)
        print(_summary_line(tr), file=sys.stderr)
    return 0


def _summary_line(tr: Trace) -> str:
    """What `cfsm generate` says of a run on stderr: its figures, then why (auto's choice,
    what was compiled unenforced, the runtime's note, skipped jumps, why it did not end)."""
    t, skipped = tr.totals, skipped_jumps_line(tr)
    spec = ((tr.request or {}).get("constraint") or {}).get("spec")
    note = (tr.model or {}).get("runtime_note")
    return (
        f"[{tr.mode}/{tr.backend}] {t.output_tokens} tokens, {t.forward_passes} "
        f"forward passes, jumps {t.jumps}, {t.wall_s} s, finished={t.finished} "
        f"({t.reason}), valid={tr.valid} ({tr.validation})"
        + (", spec reading" if spec else "")
        + (f"\nbackend chosen by auto: {tr.backend_why}" if tr.backend_why else "")
        + "".join(f"\nWARNING: {w}" for w in tr.warnings)
        + (f"\nNOTE: {note}" if note else "")
        + (f"\nNOTE: {skipped}" if skipped else "")
        + (f"\nWHY: {tr.unfinished['line']}" if tr.unfinished else "")
    )


def cmd_bench(args) -> int:
    """One suite from the registry: run it, then its results written the one way."""

    suite = args.suite_obj
    log = (lambda *_: None) if args.json else print
    write_results(suite, suite.run(args, log), args)
    return 0


def _documents(path: str | None) -> list | None:
    """The user's documents for the doctor; a line that is not JSON is an error naming it."""
    if path is None:
        return None
    out = []
    for i, doc in enumerate(read_jsonl(path), 1):
        if isinstance(doc, CfsmError):
            raise CfsmError("invalid_input", f"{path}, document {i}: {doc.message}")
        out.append(doc)
    return out


def cmd_doctor(args) -> int:
    constraint = _constraint_from(args)
    documents = _documents(args.documents)
    eng = _engine(
        args,
        load_weights=args.prompt is not None,
    )
    try:
        rep = eng.diagnose(
            constraint,
            args.prompt,
            args.samples,
            args.max_new_tokens,
            args.seed,
            args.jump_threshold,
            documents,
        )
    finally:
        eng.close()
    print(json.dumps(rep, ensure_ascii=False) if args.json else format_report(rep))
    return 0


def cmd_check(args) -> int:
    """One JSON object per (backend, text): does the constraint accept it? Every line of a
    requests file is answered, in order, whatever another line did."""
    if args.requests:
        items = read_jsonl(args.requests)
    else:
        if not args.text:
            raise CfsmError("invalid_input", "give at least one --text (or --requests FILE.jsonl)")
        base = {
            k: getattr(args, k)
            for k in ("regex", "schema", "grammar", "whitespace", "lenient", "spec")
        }
        if _constraint_from(None, base) is None:
            raise CfsmError("invalid_input", "give --regex, --schema or --grammar")
        items = [{**base, "backend": args.backend, "text": t} for t in args.text]
    eng = _engine(args, load_weights=False)
    tally = BatchTally()
    try:
        for obj in items:
            for out in _check_line(eng, obj):
                print(json.dumps(tally.record(out), ensure_ascii=False), flush=True)
    finally:
        eng.close()
    return tally.exit_code("checks")


def _check_line(eng, obj) -> list[dict]:
    """The answers to one check line: one per backend it names, each its verdict or its
    error (a line that is not a request object gets one error answer)."""

    if isinstance(obj, CfsmError) or not isinstance(obj, dict):
        why = f"a line must be a JSON object, not {type(obj).__name__}"
        return [(obj if isinstance(obj, CfsmError) else CfsmError("invalid_input", why)).to_json()]
    name = obj.get("backend") or DEFAULT_BACKEND
    out = []
    for b in BACKENDS if name == "all" else [name]:
        try:
            c = _constraint_from(None, obj)
            if c is None or not isinstance(obj.get("text"), str):
                raise CfsmError(
                    "invalid_input", "each line needs regex, schema or grammar, and text"
                )
            res = eng.compile(c, b)
            verdict = check_text(res.compiled, res.dfa, eng.ctx, obj["text"], c)
            chosen = {"auto": res.why} if res.why else {}  # why auto chose it
            out.append({"backend": res.backend or b, **chosen, "text": obj["text"], **verdict})
        except Exception as exc:  # noqa: BLE001 - one line's failure is that line's answer
            out.append({"backend": b, **line_error(exc)})
    return out


MAX_RESPONSE_FILE_BYTES = 16 * 2**20


def cmd_replay(args) -> int:
    """Another engine's output for a constraint (asked of --endpoint, or a saved response
    with --response) walked through this lab's automaton and masks; prints the replay's
    summary as JSON, writes the trace for the page with --trace."""
    from engine.replay.client import request_body, send
    from engine.serving.service import Engine

    c = _constraint_from(args)
    if c is None:
        raise CfsmError("invalid_input", "give --regex, --schema or --grammar")
    if args.response:
        text = read_user_file(args.response, "--response", MAX_RESPONSE_FILE_BYTES)
        try:
            resp, source = json.loads(text), "file"
        except (ValueError, RecursionError) as exc:
            msg = f"--response {args.response}: not JSON: {exc}"
            raise CfsmError("invalid_input", msg) from None
    elif args.endpoint and args.model:
        body = request_body(c, args.prompt, args.model, args.flavor, args.max_tokens, args.stream)
        resp = send(args.endpoint, body, args.api_key_env or "", args.timeout)
        source = "stream" if args.stream else "response"
    else:
        raise CfsmError("invalid_input", "give --endpoint and --model, or --response FILE")
    if args.save_response:
        Path(args.save_response).write_text(json.dumps(resp, ensure_ascii=False), "utf-8")
    eng = Engine(args.tokenizer, load_weights=False, trust_remote_code=args.trust_remote_code)
    meta = {"endpoint": args.endpoint or "", "model": args.model or "", "prompt": args.prompt,
            "source": source}  # fmt: skip
    tr = eng.replay(c, resp, meta, args.backend).to_json()
    if args.trace:
        Path(args.trace).write_text(json.dumps(tr, ensure_ascii=False), encoding="utf-8")
    out = {"text": tr["text"], "valid": tr["valid"], "validation": tr["validation"],
           **tr["replay"], "ideal": tr.get("ideal")}  # fmt: skip
    print(json.dumps(out, ensure_ascii=False))
    return 0


def cmd_serve(args) -> int:
    from app.listen import listen  # light: the port is open before gradio is imported

    try:
        sock = listen(args.host, args.port)
    except OSError as exc:
        raise CfsmError("invalid_input", f"cannot listen on {args.host}:{args.port}: "
                        f"{exc.strerror or exc}") from None  # fmt: skip
    url = f"http://{args.host}:{sock.getsockname()[1]}"
    print(f"cfsm serve: the playground at {url}/, the OpenAI API at {url}/v1 (requests wait "
          "while the model loads; Ctrl-C stops)", file=sys.stderr, flush=True)  # fmt: skip
    app_main.serve(
        sock=sock,
        host=args.host,
        port=args.port,
        model=args.model,
        device=args.device,
        runtime=args.runtime,
        max_states=args.max_states,
        compile_timeout_s=args.timeout,
    )
    return 0


def _add_bench_parser(sub) -> None:
    """`cfsm bench NAME [its flags]`, one subcommand per suite of the registry."""

    b = sub.add_parser("bench", help="benchmarks: cfsm bench SUITE (see each suite's --help)")
    suites = b.add_subparsers(dest="suite", required=True, metavar="SUITE")
    for suite in SUITES.values():
        p = suites.add_parser(suite.name, help=suite.help, description=suite.help)
        for flag in suite.flags:
            p.add_argument(flag.name, **flag.kwargs)
        p.add_argument(
            "--out",
            default=None,
            help=f"results JSON (default: bench-results/{suite.name}.json; a report beside it)",
        )
        p.add_argument("--json", action="store_true", help="print the results as one JSON line")
        if suite.model:
            add_model_args(p)
        p.set_defaults(func=cmd_bench, suite_obj=suite)


def bench_argv(argv: list[str]) -> list[str]:
    """`cfsm bench --suite NAME ...` (the older spelling) and a bare `cfsm bench ...` (the
    default suite) as `cfsm bench NAME ...`."""

    if not argv or argv[0] != "bench":
        return argv
    rest = list(argv[1:])
    for i, x in enumerate(rest):
        if x == "--suite" and i + 1 < len(rest):
            return ["bench", rest[i + 1], *rest[:i], *rest[i + 2 :]]
        if x.startswith("--suite="):
            return ["bench", x.split("=", 1)[1], *rest[:i], *rest[i + 1 :]]
    if rest and (rest[0] in SUITES or rest[0] in ("-h", "--help")):
        return argv
    return ["bench", DEFAULT_SUITE, *rest]


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="cfsm", description="Constrained decoding with a compressed FSM and jump-forward"
    )
    sub = p.add_subparsers(dest="cmd", required=True)

    j = sub.add_parser("jump", help="jump-forward continuation of regex prefixes")
    j.add_argument("--regex", required=True)
    j.add_argument(
        "--prefix", action="append", help="a prefix (repeatable); default: the empty prefix"
    )
    j.add_argument(
        "--json", action="store_true", help="errors as JSON on stdout (output is always JSON)"
    )
    j.set_defaults(func=cmd_jump)

    c = sub.add_parser("compile", help="compile a constraint and describe its automata")
    add_constraint_args(c, grammar=True)
    c.add_argument("--backend", default=DEFAULT_BACKEND)
    c.add_argument("--max-states", type=int, default=MAX_STATES)
    c.add_argument(
        "--timeout", type=float, default=COMPILE_TIMEOUT_S, help="compile time limit in seconds"
    )
    c.add_argument("--json", action="store_true")
    add_model_args(c)
    c.set_defaults(func=cmd_compile)

    g = sub.add_parser("generate", help="decode with the model under a constraint")
    add_optional_constraint_args(g)
    g.add_argument("--prompt")
    g.add_argument("--requests", help="JSONL file: one request per line, same fields as the flags")
    add_request_args(g)
    g.add_argument("--json", action="store_true", help="print the full trace")
    add_model_args(g)
    g.set_defaults(func=cmd_generate)

    d = sub.add_parser("doctor", help="explain a poor jump-forward speedup and what to change")
    add_constraint_args(d)
    d.add_argument("--samples", type=int, default=8, help="sample outputs to analyse")
    d.add_argument(
        "--prompt",
        default=None,
        help=(
            "generate the samples with the model from this prompt (default: synthesize them from "
            "the automaton)"
        ),
    )
    d.add_argument("--max-new-tokens", type=int, default=256)
    d.add_argument("--seed", type=int, default=0)
    d.add_argument("--jump-threshold", type=int, default=1)
    d.add_argument(
        "--documents",
        metavar="FILE.jsonl",
        help="your own valid documents, one JSON per line: each what-if says which it rejects",
    )
    d.add_argument("--json", action="store_true")
    add_model_args(d)
    d.set_defaults(func=cmd_doctor)

    _add_bench_parser(sub)

    k = sub.add_parser(
        "check", help="does a constraint accept a text? (per backend; no model weights)"
    )
    add_optional_constraint_args(k)
    k.add_argument("--backend", default=DEFAULT_BACKEND, help=f"{', '.join(BACKENDS)} or all")
    k.add_argument("--text", action="append", help="a text to check (repeatable)")
    k.add_argument(
        "--requests", default=None, help="JSONL: regex/schema/grammar, backend, whitespace, text"
    )
    k.add_argument(
        "--json", action="store_true", help="errors as JSON on stdout (output is always JSON)"
    )
    add_model_args(k)
    k.set_defaults(func=cmd_check)

    _add_replay_parser(sub)

    s = sub.add_parser("serve", help="serve the playground (and the OpenAI-compatible /v1 API)")
    s.add_argument("--host", default="127.0.0.1")
    s.add_argument("--port", type=int, default=7860)
    s.add_argument("--model", default=None)
    s.add_argument("--device", default=None)
    add_runtime_arg(s)
    s.add_argument(
        "--max-states",
        type=int,
        default=None,
        help="DFA state limit per constraint (default 10,000)",
    )
    s.add_argument(
        "--timeout", type=float, default=None, help="compile time limit in seconds (default 20)"
    )
    s.set_defaults(func=cmd_serve)
    return p


def _add_replay_parser(sub) -> None:
    r = sub.add_parser(
        "replay",
        help="walk another engine's output (an OpenAI-compatible server) through the automaton",
    )
    add_constraint_args(r, grammar=True)
    r.add_argument("--endpoint", help="the engine's base URL, e.g. http://127.0.0.1:8000/v1")
    r.add_argument("--model", help="the model name the engine serves")
    r.add_argument("--prompt", default="", help="the user message")
    r.add_argument("--flavor", default="openai", choices=("openai", "sglang", "llama-server"),
                   help="how the constraint is sent: response_format/structured_outputs (vLLM, "
                   "cfsm), response_format/regex/ebnf (SGLang), json_schema/grammar "
                   "(llama-server)")  # fmt: skip
    r.add_argument("--api-key-env", default="", help="environment variable holding the key")
    r.add_argument("--max-tokens", type=int, default=256)
    r.add_argument("--stream", action="store_true", help="stream, timing each token")
    r.add_argument("--timeout", type=float, default=120.0, help="seconds to wait (default 120)")
    r.add_argument("--response", help="replay a saved response (JSON) instead of asking")
    r.add_argument("--save-response", help="keep the engine's response in this file")
    r.add_argument("--trace", help="write the replay's trace (the page opens it) to this file")
    r.add_argument("--backend", default=DEFAULT_BACKEND, help="whose masks the walk uses")
    r.add_argument(
        "--tokenizer", default=None, help="the tokenizer here (HF id or path; default: embedded)"
    )
    r.add_argument("--trust-remote-code", action="store_true")
    r.set_defaults(func=cmd_replay)


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(bench_argv(sys.argv[1:] if argv is None else list(argv)))
    as_json = bool(getattr(args, "json", False)) or args.cmd in ("jump", "check", "replay")
    try:
        return int(args.func(args) or 0)
    except CfsmError as exc:
        if as_json:
            print(json.dumps(exc.to_json(), ensure_ascii=False))
        else:
            print(f"error ({exc.kind}): {exc.message}", file=sys.stderr)
        return exc.spec.exit_code  # 2 for bad input (errors.ErrorKind)
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # `cfsm ... | head`: the reader left; nothing more to say
        sys.stdout = open(os.devnull, "w")  # noqa: SIM115 - stdout's own close must not raise
        return 0
    except Exception as exc:  # noqa: BLE001 - last line of defence: one line, no traceback
        err = internal_error(exc)
        if as_json:
            print(json.dumps(err.to_json(), ensure_ascii=False))
        else:
            print(f"internal error: {err.message}", file=sys.stderr)
        return err.spec.exit_code


if __name__ == "__main__":
    sys.exit(main())
