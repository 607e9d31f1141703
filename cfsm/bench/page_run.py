"""`cfsm bench --suite page-run`: a preset run as a user times it, in Chromium: from the
click on Run to the step view of the new run drawn at step 0 (compile, decode, the step
view's bundle, its drawing), measured in the page (`performance.now()` at the click
event, then every animation frame until the view is there), and when the first streamed
token arrived; once per runtime, alternating, after one untimed run each (the first run on
a runtime loads its model)."""

from __future__ import annotations

import json
import statistics
from pathlib import Path

from .scrub import served_page

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
  window.__run = {};
  document.querySelector('#run').addEventListener('click', () => {
    const m = window.__run, t0 = performance.now();
    m.t0 = t0;
    const loop = () => {
      const v = document.querySelector('#step-view');
      if (!('first' in m) && document.querySelectorAll('#live-strip .cfsm-chip').length)
        m.first = performance.now() - t0;
      if (v && v.dataset.run && v.dataset.run !== old && v.dataset.step === '0') {
        m.done = performance.now() - t0; return;
      }
      requestAnimationFrame(loop);
    };
    requestAnimationFrame(loop);
  }, {capture: true, once: true});
}"""


def timed_run(page) -> tuple[dict, str]:
    """Seconds from the click on Run to the new run's step view drawn at step 0, and to
    its first streamed token, measured in the page; and the run's summary."""
    page.evaluate(PROBE)
    page.locator("#run").click()
    page.wait_for_function("window.__run && 'done' in window.__run", timeout=600_000)
    m = page.evaluate("window.__run")
    times = {"done": round(m["done"] / 1e3, 3), "first": round(m.get("first", 0) / 1e3, 3)}
    return times, page.locator("#summary").inner_text()


def main(
    out_path: str | None = None,
    port: int = 7878,
    preset: str = "SGLang character (regex)",
    repeats: int = 3,
) -> dict:
    times: dict[str, list[float]] = {r: [] for r in RUNTIMES}
    first: dict[str, list[float]] = {r: [] for r in RUNTIMES}
    summaries: dict[str, str] = {}
    with served_page(port) as page:
        page.wait_for_function(
            "document.querySelector('#model-status')?.innerText.includes('Model ready')",
            timeout=600_000,
        )
        _pick_preset(page, preset)
        for rt in RUNTIMES:  # untimed: loads the runtime's model, compiles
            _choose(page, "runtime", rt)
            timed_run(page)
        for _ in range(repeats):
            for rt in RUNTIMES:
                _choose(page, "runtime", rt)
                m, summaries[rt] = timed_run(page)
                times[rt].append(m["done"])
                first[rt].append(m["first"])
                print(
                    f"{rt:14s} click to step view {m['done']:6.2f} s, to the first token "
                    f"{m['first']:5.2f} s"
                )
    med = {rt: statistics.median(v) for rt, v in times.items()}
    res = {
        "suite": "page-run",
        "preset": preset,
        "click_to_step_view_s": times,
        "click_to_first_token_s": first,
        "median_s": med,
        "median_first_token_s": {rt: statistics.median(v) for rt, v in first.items()},
        "summaries": summaries,
        "auto_speedup_vs_transformers": round(med["transformers"] / max(med["auto"], 1e-9), 2),
    }
    print(
        f"{preset}: auto (llama.cpp) {med['auto']:.2f} s, transformers {med['transformers']:.2f} "
        f"s: {res['auto_speedup_vs_transformers']}x"
    )
    if out_path:
        Path(out_path).parent.mkdir(parents=True, exist_ok=True)
        Path(out_path).write_text(json.dumps(res, indent=1))
    return res
