"""The step view's scrub time as a user feels it: in Chromium, from the key press on the
scrubber to the step view's `data-step` changing (every panel updated), measured in the
page. Traces reach the page by the upload widget, so no model is needed for the synthetic
cases; the character case is a real run of the embedded model. Target: median <= 150 ms."""

from __future__ import annotations

import json
import random
import statistics
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path

from engine.analysis.doctor import synthesize
from engine.constraint import Constraint
from engine.decoding.decoder import GenerateRequest
from engine.decoding.trace import StepRecord, Totals, Trace, encode_mask
from engine.lazy import lazy_module
from engine.regex.compressed import CompressedFSM
from engine.regex.dfa import build_char_dfa
from engine.serving.service import Engine, automaton_json

from .suite import Suite

# the page (app.main imports gradio: seconds) and the browser driver (a test extra) only
# when the suite runs; `cfsm` itself imports this module
app_main = lazy_module("app.main")
app_presets = lazy_module("app.presets")
playwright_sync = lazy_module("playwright.sync_api")

CHROMIUM = "/usr/bin/chromium"
PROBE = """() => {
  window.__scrub = []; window.__t0 = null;
  document.addEventListener('keydown', () => { window.__t0 = performance.now(); }, true);
  const sv = document.querySelector('#step-view');
  new MutationObserver(() => {
    if (window.__t0 === null) return;
    window.__scrub.push(performance.now() - window.__t0); window.__t0 = null;
  }).observe(sv, {attributes: true, attributeFilter: ['data-step']});
}"""


def synthetic_trace(pattern: str, vocab_size: int = 49152, steps: int = 40, seed: int = 0) -> Trace:
    """A trace shaped like the engine's, on a random string of the regex (no model)."""

    dfa = build_char_dfa(pattern)

    rng = random.Random(seed)
    text = (synthesize(dfa, 1, seed, soft_len=400, hard_len=800, stop_prob=0.01) or [""])[0]
    auto = automaton_json(dfa)
    path = [dfa.initial]
    for ch in text:
        path.append(dfa.step(path[-1], ch))
    auto["path"] = path
    cf = CompressedFSM(dfa)
    n = max(1, min(steps, len(text)))
    cuts = sorted(rng.sample(range(len(text)), n - 1)) if len(text) > n else list(range(len(text)))
    bounds = [0] + cuts + [len(text)]
    mask = encode_mask(list(range(0, vocab_size, 7)), vocab_size)
    tokens, st = [], []
    for i in range(len(bounds) - 1):
        a, b = bounds[i], bounds[i + 1]
        if a == b:
            continue
        piece, tid = text[a:b], 100 + i
        st.append(
            StepRecord(
                index=len(st),
                char_state=path[a],
                token_state=path[a],
                char_offset=a,
                allowed=7022,
                token_id=tid,
                token_text=piece,
                origin="forced" if cf.is_jumpable(path[a]) else "model",
                prob=0.5,
                raw_prob=0.4,
                feasible_mass=0.8,
                top_raw=[[tid, piece, 0.4]],
                top_masked=[[tid, piece, 0.5]],
                forward_ms=50.0,
                mask_us=20.0,
                sample_us=100.0,
                output_len=len(tokens),
                mask_key="m",
                allowed_sample=[[tid, piece, path[b], 0.5]],
            )
        )
        tokens.append({"id": tid, "text": piece, "origin": st[-1].origin, "step": st[-1].index})
    n_tok = len(tokens)
    totals = Totals(
        forward_passes=n_tok + 1,
        output_tokens=n_tok,
        prompt_tokens=0,
        prefilled_tokens=0,
        steps=len(st),
        model_steps=sum(s.origin == "model" for s in st),
        forced_steps=sum(s.origin == "forced" for s in st),
        jumped_tokens=0,
        jumps=0,
        jumped_chars=0,
        wall_s=0.05 * (n_tok + 1),
        decode_s=0.05 * n_tok,
        prefill_ms=50.0,
        forward_s=0.05 * (n_tok + 1),
        grammar_s=0.0,
        grammar_us_per_step=20.0,
        sample_us_per_step=100.0,
        forward_ms_per_pass=50.0,
        tokens_per_s=20.0,
        compile_s=0.0,
        finished=True,
        reason="complete",
    )
    return Trace(
        request={"prompt": "", "mode": "masked"},
        model={"vocab_size": vocab_size},
        backend="fsm",
        mode="masked",
        prompt_tokens=0,
        text=text,
        tokens=tokens,
        steps=st,
        jumps=[],
        masks={"m": mask},
        totals=totals,
        scheduler={"kind": "synthetic", "max_batch": 1},
        automaton=auto,
    )


def character_trace() -> dict:
    """A real run of the SGLang character preset on the embedded model."""
    p = app_presets.presets()["SGLang character (regex)"]
    eng = Engine()
    try:
        return eng.generate(
            GenerateRequest(
                prompt=p["prompt"],
                constraint=Constraint("regex", p["text"]),
                mode="jump",
                max_new_tokens=256,
            )
        ).to_json()
    finally:
        eng.close()


def measure_page(page, trace: dict, steps: int = 40, whole: bool = False) -> dict:
    """Upload `trace`, then press the right arrow on the scrubber `steps` times."""
    path = Path(tempfile.mkdtemp(prefix="cfsm-scrub-")) / "trace.json"
    path.write_text(json.dumps(trace), encoding="utf-8")
    box = page.locator("#whole input[type=checkbox]")
    if box.is_checked() != whole:
        box.click()
    if page.locator("#up-trace input[type=file]").count() == 0:
        page.locator("#share-export").get_by_text("Share and export").click()
    t0 = time.perf_counter()
    page.locator("#up-trace input[type=file]").set_input_files(str(path))
    run = page.evaluate(
        "document.querySelector('#step-view') ? document.querySelector('#step-view').dataset.run "
        "|| '' : ''"
    )
    page.wait_for_function(
        f"(() => {{ const v = document.querySelector('#step-view'); return v && v.dataset.run && "
        f"v.dataset.run !== '{run}' && v.dataset.step === '0'; }})()",
        timeout=120_000,
    )
    load_s = time.perf_counter() - t0
    # the scrubs below time the whole bundle: the later layouts and masks come last
    run = page.evaluate("document.querySelector('#step-view').dataset.run")
    page.wait_for_selector(f'#step-view-rest script[data-run="{run}"]', state="attached")
    page.evaluate(PROBE)
    rng = page.locator("#step-slider input[type=range]")
    rng.focus()
    n = min(steps, len(trace["steps"]))
    for i in range(1, n + 1):
        rng.press("ArrowRight")
        page.wait_for_function(
            f"document.querySelector('#step-view').dataset.step === '{i}'", timeout=30_000
        )
    times = sorted(page.evaluate("window.__scrub"))
    kb = (
        page.evaluate(
            "document.querySelector('#step-view').outerHTML.length + "
            "document.querySelector('#step-view-rest').innerHTML.length"
        )
        / 1024
    )
    return {
        "states": trace["automaton"]["num_states"],
        "steps": n,
        "upload_to_view_s": round(load_s, 2),
        "view_kb": round(kb),
        "median_ms": round(statistics.median(times), 1),
        "p95_ms": round(times[int(0.95 * (len(times) - 1))], 1),
        "max_ms": round(times[-1], 1),
    }


CASES = [
    ("SGLang character (real run)", "CHARACTER", False),
    ("SGLang character, whole automaton", "CHARACTER", True),
    ("2,001-state automaton (focus views)", r"[a-z0-9]{1,2000}", False),
    ("2,001-state automaton, whole asked (refused)", r"[a-z0-9]{1,2000}", True),
]


@contextmanager
def served_page(port: int):
    """The app served here and one Debian Chromium page on it (1440x900), closed after."""
    demo, _hub = app_main.serve(port=port, prevent_thread_lock=True)
    try:
        with playwright_sync.sync_playwright() as p:
            browser = p.chromium.launch(
                executable_path=CHROMIUM, headless=True, args=["--no-sandbox", "--disable-gpu"]
            )
            page = browser.new_page(viewport={"width": 1440, "height": 900})
            page.goto(f"http://127.0.0.1:{port}", wait_until="domcontentloaded")
            try:
                yield page
            finally:
                browser.close()
    finally:
        demo.close()


def run(port: int = 7877, log=print) -> dict:
    traces = {"CHARACTER": character_trace()}
    results = {}
    with served_page(port) as page:
        page.wait_for_selector("#step-slider", timeout=60_000)
        for name, rx, whole in CASES:
            trace = traces.get(rx) or synthetic_trace(rx, steps=60).to_json()
            results[name] = measure_page(page, trace, whole=whole)
            log(f"{name:45s} {results[name]}")
    return results


def format_table(res: dict) -> str:
    lines = [
        "| case | states | upload to view s | view KB | scrub median ms | p95 ms | max ms |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for name, r in res.items():
        lines.append(
            f"| {name} | {r.get('states')} | {r.get('upload_to_view_s')} | {r.get('view_kb')} "
            f"| {r.get('median_ms')} | {r.get('p95_ms')} | {r.get('max_ms')} |"
        )
    return "\n".join(lines)


SUITE = Suite(
    "scrub",
    "step-view scrub time, from the key press to the view updated, measured in Chromium",
    lambda args, log: run(log=log),
    format_table,
    model=False,
)
