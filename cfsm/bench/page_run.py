"""`cfsm bench --suite page-run`: a preset run as a user times it, in Chromium: from the
click on Run to the step view of the new run on the page (compile, decode, the step
view's bundle, its drawing), once per runtime, alternating, after one untimed run each
(the first run on a runtime loads its model)."""

from __future__ import annotations

import json
import statistics
import time
from pathlib import Path

from .scrub import CHROMIUM

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


def timed_run(page) -> tuple[float, str]:
    """Seconds from the click on Run to the new run's step view, and the run id."""
    old = page.evaluate("document.querySelector('#step-view')?.dataset.run || ''")
    t0 = time.perf_counter()
    page.locator("#run").click()
    page.wait_for_function(
        f"(() => {{ const v = document.querySelector('#step-view'); return v && v.dataset.run && "
        f"v.dataset.run !== '{old}' && v.dataset.step === '0'; }})()",
        timeout=600_000,
        polling=10,
    )
    return time.perf_counter() - t0, page.locator("#summary").inner_text()


def main(
    out_path: str | None = None,
    port: int = 7878,
    preset: str = "SGLang character (regex)",
    repeats: int = 3,
) -> dict:
    from playwright.sync_api import sync_playwright

    from app.main import serve

    demo, _hub = serve(port=port, prevent_thread_lock=True)
    times: dict[str, list[float]] = {r: [] for r in RUNTIMES}
    summaries: dict[str, str] = {}
    try:
        with sync_playwright() as p:
            browser = p.chromium.launch(
                executable_path=CHROMIUM, headless=True, args=["--no-sandbox", "--disable-gpu"]
            )
            page = browser.new_page(viewport={"width": 1440, "height": 900})
            page.goto(f"http://127.0.0.1:{port}", wait_until="domcontentloaded")
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
                    s, summaries[rt] = timed_run(page)
                    times[rt].append(round(s, 3))
                    print(f"{rt:14s} click to step view {s:6.2f} s")
            browser.close()
    finally:
        demo.close()
    med = {rt: statistics.median(v) for rt, v in times.items()}
    res = {
        "suite": "page-run",
        "preset": preset,
        "click_to_step_view_s": times,
        "median_s": med,
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
