"""`cfsm bench schemas-api`: every schema of the shared JSONSchemaBench sample sent to
`cfsm serve`'s /v1 one after another, as `response_format` (the official `openai` client,
no retries, backend `auto`, a few tokens each), the way an engineer tries their schemas on
a running server. Reported: how each request was answered (200, or an error in OpenAI's
shape with its status and kind; a timeout, a 5xx or a dropped connection counts as not
answered), latencies, and the server process's resident memory over the run against its
idle size (target: within 1.5 GB), with its compile workers beside it."""

from __future__ import annotations

import json
import statistics
import time
from collections import Counter

from engine.lazy import lazy_module
from engine.serving.memory import PeakMemory

from .api import free_port
from .jsonschemabench import sample
from .suite import Flag, Suite

app_main = lazy_module("app.main")
TARGET_GROWTH_MIB = 1536


def ask(client, schema_text: str, max_tokens: int) -> dict:
    """One request; how it was answered (status, error kind) and how long it took."""
    import openai

    t0 = time.perf_counter()
    try:
        schema = json.loads(schema_text)
    except ValueError:
        schema = schema_text  # sent as is: the server says what is wrong with it
    try:
        r = client.chat.completions.create(
            model="embedded",
            messages=[{"role": "user", "content": "Write an example document."}],
            max_tokens=max_tokens,
            temperature=0,
            response_format={
                "type": "json_schema",
                "json_schema": {"name": "schema", "schema": schema},
            },
        )
        out = {"status": 200, "backend": ((r.model_extra or {}).get("cfsm") or {}).get("backend")}
    except openai.APIStatusError as exc:
        body = exc.body if isinstance(exc.body, dict) else {}
        err = body.get("error", body) if isinstance(body, dict) else {}
        out = {"status": exc.status_code, "kind": (err or {}).get("code") or "?"}
        out["message"] = str((err or {}).get("message", ""))[:2000]
    except openai.APIError as exc:  # a timeout or a dropped connection: not answered
        out = {"status": None, "kind": type(exc).__name__, "message": str(exc)[:300]}
    out["seconds"] = round(time.perf_counter() - t0, 3)
    return out


def run(per_subset: int | None, max_tokens: int, log=print) -> dict:
    import openai

    items = sample(per_subset)
    port = free_port()
    demo, hub = app_main.serve(port=port, prevent_thread_lock=True)
    rows = []
    try:
        hub.get().cache.wait_ready()
        client = openai.OpenAI(
            base_url=f"http://127.0.0.1:{port}/v1", api_key="-", max_retries=0, timeout=180
        )
        time.sleep(1.0)  # the idle size: after start-up, before the first schema
        with PeakMemory() as mem:
            for item in items:
                r = ask(client, item.schema_text, max_tokens)
                rows.append(r := {"subset": item.subset, "id": item.id, **r})
                log(f"{item.subset:15s} {item.id[:28]:28s} {r['status']} {r.get('kind', '')}"
                    f" {r['seconds']:.2f} s")  # fmt: skip
    finally:
        demo.close()
    return summarize(rows, mem.figures())


def summarize(rows: list[dict], memory: dict) -> dict:
    answered = [r for r in rows if r["status"] is not None and r["status"] < 500]
    secs = sorted(r["seconds"] for r in rows)
    growth = memory.get("peak_mib", 0) - memory.get("idle_mib", 0)
    return {
        "suite": "schemas-api",
        "requests": len(rows),
        "answered": len(answered),
        "statuses": dict(Counter(str(r["status"]) for r in rows).most_common()),
        "error_kinds": dict(Counter(r["kind"] for r in rows if "kind" in r).most_common()),
        "backends": dict(Counter(r["backend"] for r in rows if r.get("backend")).most_common()),
        "seconds_p50": statistics.median(secs) if secs else None,
        "seconds_max": secs[-1] if secs else None,
        "memory": memory,
        "growth_mib": growth,
        "targets": {
            "every request answered": len(answered) == len(rows),
            "memory within 1.5 GB of idle": growth <= TARGET_GROWTH_MIB,
        },
        "rows": rows,
    }


def table(res: dict) -> str:
    m = res["memory"]
    return (
        f"{res['answered']}/{res['requests']} requests answered; statuses {res['statuses']}; "
        f"error kinds {res['error_kinds']}; backends {res['backends']}\n"
        f"latency p50 {res['seconds_p50']} s, max {res['seconds_max']} s\n"
        f"server resident memory: {m['idle_mib']} MiB idle, peak {m['peak_mib']} MiB "
        f"(+{res['growth_mib']} MiB; {m['peak_with_workers_mib']} MiB with its compile workers)"
        f"\ntargets: {res['targets']}"
    )


SUITE = Suite(
    "schemas-api",
    "every schema of the sample through /v1 one after another: answers and server memory",
    lambda args, log: run(args.per_subset, args.max_new_tokens, log),
    table,
    (
        Flag("--per-subset", {"type": int, "default": None, "help": "schemas per subset (all)"}),
        Flag("--max-new-tokens", {"type": int, "default": 8}),
    ),
    summary=lambda res: {k: v for k, v in res.items() if k != "rows"},
    model=False,
)
