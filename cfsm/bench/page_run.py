"""`cfsm bench --suite page-run`: a preset run as a user times it, in Chromium: from the
click on Run to its first streamed token, to its first live step view (drawn while it
decodes), and to the finished run's step view drawn at step 0 (compile, decode, the step
view's bundle, its drawing), measured in the page (`performance.now()` at the click
event, then in the frame after each change to the page until the view is there), when the
first streamed token arrived and when the timeline below was drawn (the whole page
updated); once per runtime, alternating, after one untimed run each (the first run on a
runtime loads its model)."""

from __future__ import annotations

import statistics

from .scrub import served_page
from .suite import Suite

RUNTIMES = ("auto", "transformers")  # auto: llama.cpp for the embedded GGUF on a CPU


def _choose(page, widget: str, value: str) -> None:
    dd = page.locator(f"#{widget} input")
    dd.click()
    page.get_by_role("option", name=value, exact=True).click()


def _pick_preset(page, name: str) -> None:
    dd = page.locator("#preset input")
    dd.click()
    dd.fill(name.split(" (")[0])
    page.get_by_role("option", name=name).click()


PROBE = """() => {
  const old = document.querySelector('#step-view')?.dataset.run || '';
  const plot = () => document.querySelector('#timeline-plot .js-plotly-plot');
  const oldData = plot()?.data;
  window.__run = {};
  document.querySelector('#run').addEventListener('click', () => {
    const m = window.__run, t0 = performance.now();
    m.t0 = t0;
    let queued = false;
    const check = () => {
      queued = false;
      const v = document.querySelector('#step-view'), now = performance.now() - t0;
      if (!('first' in m) && document.querySelectorAll('#live-strip .cfsm-chip').length)
        m.first = now;
      // the live step view (the run's first steps, drawn while it decodes)
      if (!('live' in m) && v && v.dataset.run !== old && v.dataset.step === 'live')
        m.live = now;
      if (!('done' in m) && v && v.dataset.run && v.dataset.run !== old && v.dataset.step === '0')
        m.done = now;
      // the timeline is drawn after the step view, from the run's next update
      if ('done' in m && plot()?.data && plot().data !== oldData) {
        m.page = now;
        obs.disconnect();
      }
    };
    // looked at in the frame after each change to the page (the frame that draws it); a
    // loop asking for every frame kept the browser drawing frames through the whole run,
    // on the cores the run needs
    const obs = new MutationObserver(() => {
      if (!queued) { queued = true; requestAnimationFrame(check); }
    });
    obs.observe(
      document.body, {childList: true, subtree: true, attributes: true, characterData: true});
  }, {capture: true, once: true});
}"""


def timed_run(page) -> tuple[dict, str]:
    """Seconds from the click on Run to the new run's step view drawn at step 0 (`done`),
    to its first streamed token (`first`) and to its timeline drawn below (`page`: the
    whole page updated), measured in the page; and the run's summary."""
    page.evaluate(PROBE)
    page.locator("#run").click()
    page.wait_for_function("window.__run && 'page' in window.__run", timeout=600_000)
    m = page.evaluate("window.__run")
    # a run that ends before its first live view is due has none: `live` is then None
    times = {k: None if k not in m else round(m[k] / 1e3, 3) for k in MARKS}
    return times, page.locator("#summary").inner_text()


MARKS = {
    "live": "click_to_live_step_view_s",
    "done": "click_to_step_view_s",
    "first": "click_to_first_token_s",
    "page": "click_to_page_s",
}


def _measure(page, preset: str, repeats: int) -> tuple[dict, dict]:
    """Each runtime's times per mark, alternating, after one untimed run each (the first
    run on a runtime loads its model and compiles); and each runtime's last summary."""
    runs: dict[str, dict[str, list[float]]] = {k: {r: [] for r in RUNTIMES} for k in MARKS}
    summaries: dict[str, str] = {}
    page.wait_for_function(
        "document.querySelector('#model-status')?.innerText.includes('Model ready')",
        timeout=600_000,
    )
    _pick_preset(page, preset)
    for rt in RUNTIMES:
        _choose(page, "runtime", rt)
        timed_run(page)
    for _ in range(repeats):
        for rt in RUNTIMES:
            _choose(page, "runtime", rt)
            m, summaries[rt] = timed_run(page)
            for k in MARKS:
                runs[k][rt].append(m[k])
            live = "none" if m["live"] is None else f"{m['live']:5.2f} s"
            print(
                f"{rt:14s} click to the first token {m['first']:5.2f} s, to the live step "
                f"view {live}, to the finished step view {m['done']:6.2f} s, to the timeline "
                f"drawn {m['page']:6.2f} s"
            )
    return runs, summaries


def run(
    port: int = 7878,
    preset: str = "SGLang character (regex)",
    repeats: int = 9,
    log=print,
) -> dict:
    with served_page(port) as page:
        runs, summaries = _measure(page, preset, repeats)
    med = {k: {rt: _median(v) for rt, v in runs[k].items()} for k in MARKS}
    ratio = {
        k: round(med[k]["transformers"] / max(med[k]["auto"], 1e-9), 2) for k in ("done", "page")
    }
    # each pair ran back to back: the median of their ratios is steadier than the ratio of
    # medians when the machine's speed drifts during the run (shared 2-core machines do)
    pairs = {
        k: [
            round(t / max(a, 1e-9), 2)
            for a, t in zip(runs[k]["auto"], runs[k]["transformers"], strict=True)
        ]
        for k in ("done", "page")
    }
    res = {
        "suite": "page-run",
        "preset": preset,
        **{MARKS[k]: runs[k] for k in MARKS},
        "median_s": med["done"],
        "median_first_token_s": med["first"],
        "median_live_view_s": med["live"],
        "median_page_s": med["page"],
        "summaries": summaries,
        "auto_speedup_vs_transformers": ratio["done"],
        "auto_speedup_vs_transformers_page": ratio["page"],
        "pair_ratios": pairs["done"],
        "pair_ratios_page": pairs["page"],
        "median_pair_ratio": statistics.median(pairs["done"]),
        "median_pair_ratio_page": statistics.median(pairs["page"]),
    }
    log(
        f"{preset}: click to step view: auto (llama.cpp) {med['done']['auto']:.2f} s, "
        f"transformers {med['done']['transformers']:.2f} s: {ratio['done']}x; to the timeline "
        f"drawn: {med['page']['auto']:.2f} s against {med['page']['transformers']:.2f} s: "
        f"{ratio['page']}x; run by run (pairs back to back): {pairs['done']}, median "
        f"{res['median_pair_ratio']}x to the step view, {res['median_pair_ratio_page']}x to the "
        "timeline drawn"
    )
    return res


def _median(xs: list) -> float | None:
    """The median of the runs that had the mark (a run may end before a live view)."""
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def _s(x: float | None) -> str:
    return "none" if x is None else f"{x:.2f}"


def format_table(res: dict) -> str:
    med, first, page = res["median_s"], res["median_first_token_s"], res["median_page_s"]
    live = res.get("median_live_view_s") or {}
    rows = [
        "| runtime | first token s | first step view (live) s | finished step view s "
        "| whole page s |",
        "|---|---:|---:|---:|---:|",
    ]
    for rt in med:
        rows.append(
            f"| {rt} | {first[rt]:.2f} | {_s(live.get(rt))} | {med[rt]:.2f} | {page[rt]:.2f} |"
        )
    rows.append(
        f"\nllama.cpp (auto) against PyTorch: {res['auto_speedup_vs_transformers']}x to the step "
        f"view (median of pairs {res['median_pair_ratio']}x), "
        f"{res['auto_speedup_vs_transformers_page']}x to the whole page"
    )
    return "\n".join(rows)


SUITE = Suite(
    "page-run",
    "a preset run in Chromium, from the click on Run to its drawn step view, per runtime",
    lambda args, log: run(log=log),
    format_table,
    model=False,
)
