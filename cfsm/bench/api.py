"""`cfsm bench api`: the same concurrent requests through the OpenAI-compatible /v1 API
(the official `openai` client) and through the Gradio API (`gradio_client`, the page's
`/run`), against one `cfsm serve` in this process; each round sends N requests at once
(one client per thread, as N users would), the two APIs alternating, after one untimed
round each. Reported: each API's median round, output tokens per second, and the ratio,
measured side by side in one run; and how many texts both wrote alike (greedy; a batch's
composition changes llama.cpp's sums a little, so a text may differ)."""

from __future__ import annotations

import socket
import statistics
import time
from concurrent.futures import ThreadPoolExecutor

from engine.lazy import lazy_module

from .decode import paper_items
from .suite import Flag, Suite

app_main = lazy_module("app.main")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Clients:
    """One client per concurrent user, made before any round is timed."""

    def __init__(self, url: str, n: int) -> None:
        import openai
        from gradio_client import Client

        self.v1 = [openai.OpenAI(base_url=f"{url}/v1", api_key="-", max_retries=0)
                   for _ in range(n)]  # fmt: skip
        self.gradio = [Client(url, verbose=False) for _ in range(n)]

    def via_v1(self, i: int, prompt: str, regex: str, max_new: int) -> tuple[str, int]:
        r = self.v1[i].chat.completions.create(
            model="embedded", messages=[{"role": "user", "content": prompt}], temperature=0,
            max_tokens=max_new, extra_body={"guided_regex": regex, "mode": "jump"},
        )  # fmt: skip
        return r.choices[0].message.content, r.usage.completion_tokens

    def via_gradio(self, i: int, prompt: str, regex: str, max_new: int) -> tuple[str, int]:
        tr = self.gradio[i].predict(prompt, "regex", regex, "compact", "fsm", "jump", max_new, 0.0,
                                    0, api_name="/run")  # fmt: skip
        return tr["text"], tr["totals"]["output_tokens"]


def _round(clients: Clients, how: str, prompts: list[str], regex: str, max_new: int) -> dict:
    call = getattr(clients, how)
    t0 = time.perf_counter()
    with ThreadPoolExecutor(len(prompts)) as pool:
        outs = list(pool.map(lambda ip: call(ip[0], ip[1], regex, max_new), enumerate(prompts)))
    wall = time.perf_counter() - t0
    return {"wall_s": wall, "texts": [t for t, _ in outs], "tokens": sum(n for _, n in outs)}


def run(args, log=print) -> dict:
    regex, items = paper_items("character", args.clients)
    prompts = [p for _, p in items]
    port = free_port()
    demo, hub = app_main.serve(port=port, prevent_thread_lock=True)
    try:
        hub.get()
        clients = Clients(f"http://127.0.0.1:{port}", len(prompts))
        rounds: dict[str, list[dict]] = {"via_v1": [], "via_gradio": []}
        for k in range(args.rounds + 1):  # the first round of each is untimed (warm-up)
            for how in rounds:
                r = _round(clients, how, prompts, regex, args.max_new_tokens)
                log(f"round {k} {how}: {r['wall_s']:.2f} s, {r['tokens']} tokens")
                if k:
                    rounds[how].append(r)
    finally:
        demo.close()
    return summarize(rounds, len(prompts))


def summarize(rounds: dict, clients: int) -> dict:
    out: dict = {"clients": clients, "rounds": len(rounds["via_v1"])}
    for how, rs in rounds.items():
        wall = statistics.median(r["wall_s"] for r in rs)
        tokens = statistics.median(r["tokens"] for r in rs)
        out[how] = {"median_round_s": round(wall, 3), "tokens_per_s": round(tokens / wall, 1),
                    "rounds_s": [round(r["wall_s"], 3) for r in rs]}  # fmt: skip
    out["v1_over_gradio_throughput"] = round(
        out["via_v1"]["tokens_per_s"] / out["via_gradio"]["tokens_per_s"], 3
    )
    # greedy, yet a batch's composition changes llama.cpp's sums a little: a text may differ
    pairs = zip(rounds["via_v1"], rounds["via_gradio"], strict=True)
    same = [x == y for a, b in pairs for x, y in zip(a["texts"], b["texts"], strict=True)]
    out["identical_texts"] = f"{sum(same)}/{len(same)}"
    return out


def table(res: dict) -> str:
    rows = [f"{res['clients']} concurrent clients, {res['rounds']} timed rounds each (median)",
            f"{'API':28s} {'round s':>9s} {'tok/s':>8s}"]  # fmt: skip
    for how, label in (("via_v1", "/v1 (openai client)"), ("via_gradio", "Gradio /run")):
        r = res[how]
        rows.append(f"{label:28s} {r['median_round_s']:9.2f} {r['tokens_per_s']:8.1f}")
    rows.append(f"/v1 throughput / Gradio: {res['v1_over_gradio_throughput']:.3f}x; "
                f"identical texts: {res['identical_texts']}")  # fmt: skip
    return "\n".join(rows)


SUITE = Suite(
    name="api",
    help="the same concurrent requests through /v1 (openai client) and the Gradio API",
    run=run,
    table=table,
    flags=(
        Flag("--clients", {"type": int, "default": 8, "help": "concurrent users"}),
        Flag("--rounds", {"type": int, "default": 3, "help": "timed rounds per API"}),
        Flag("--max-new-tokens", {"type": int, "default": 256}),
    ),
    model=False,
)
