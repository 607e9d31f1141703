"""The playground in a real browser: Debian chromium driven by playwright (no
downloaded browser). Loads the page, picks the character preset, runs, scrubs, and
checks every panel shows content from this run. Screenshots go to test-artifacts/."""

from __future__ import annotations

import os
import re
import shutil
import socket
from pathlib import Path

import pytest

pytestmark = [pytest.mark.browser, pytest.mark.model]

CHROMIUM = "/usr/bin/chromium"
ARTIFACTS = Path(__file__).resolve().parent.parent / "test-artifacts"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def app_url(engine):
    if not os.path.exists(CHROMIUM):
        pytest.fail("Debian chromium is missing: run `make test` (it installs it) or apt-get install chromium")
    from app.main import serve

    port = _free_port()
    demo, hub = serve(port=port, prevent_thread_lock=True)
    yield f"http://127.0.0.1:{port}"
    demo.close()


@pytest.fixture(scope="module")
def page(app_url):
    from playwright.sync_api import sync_playwright

    ARTIFACTS.mkdir(exist_ok=True)
    user_dir = ARTIFACTS / "chromium-profile"
    shutil.rmtree(user_dir, ignore_errors=True)
    with sync_playwright() as p:
        browser = p.chromium.launch(
            executable_path=CHROMIUM,
            headless=True,
            args=["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
                  "--disable-component-update", "--disable-sync"],
        )
        pg = browser.new_page(viewport={"width": 1500, "height": 1100})
        pg.goto(app_url, wait_until="domcontentloaded")
        yield pg
        browser.close()


def test_character_preset_run_and_scrub(page):
    page.wait_for_selector("#model-status", timeout=60_000)
    page.wait_for_function("document.querySelector('#model-status').innerText.includes('Model ready')", timeout=180_000)
    # choose the character preset from the dropdown
    dd = page.locator("#preset input")
    dd.click()
    dd.fill("SGLang character")
    page.get_by_role("option", name="SGLang character (regex)").click()
    page.wait_for_function("document.querySelector('#regex-input textarea').value.includes('Gryffindor')", timeout=10_000)
    page.locator("#run").click()
    page.wait_for_function("document.querySelector('#summary').innerText.includes('forward passes') && "
                           "document.querySelector('#summary').innerText.includes('finished')", timeout=240_000)
    page.screenshot(path=str(ARTIFACTS / "step-view-initial.png"), full_page=True)
    # the output was checked against the regex, and the badge says so
    assert "\u2713 valid: matches the regex" in page.locator("#summary").inner_text()

    # move the scrubber: the range input responds to the keyboard
    rng = page.locator("#scrubber input[type=range]")
    rng.focus()
    for _ in range(6):
        rng.press("ArrowRight")
    page.wait_for_function("document.querySelector('#scrubber input[type=number]').value === '6'", timeout=10_000)
    page.wait_for_function("document.querySelector('#caption').innerText.includes('Step 6')", timeout=20_000)

    # the FSM graph: an SVG with states, a highlighted current state and chain labels
    svg = page.locator("#fsm-graph svg")
    assert svg.count() == 1
    svg_html = svg.inner_html()
    assert "<ellipse" in svg_html and "#f97316" in svg_html
    assert page.locator("#fsm-graph svg g.node").count() >= 5
    # the mask plot and the top-k plot are plotly figures with data
    page.wait_for_selector("#mask-plot .js-plotly-plot", timeout=20_000)
    assert "Allowed-token mask" in page.locator("#mask-plot").inner_text()
    page.wait_for_selector("#topk-plot .js-plotly-plot", timeout=20_000)
    # the token strip: chips from this run, some jumped
    chips = page.locator("#token-strip .cfsm-chip[data-origin]")
    assert chips.count() > 20
    assert page.locator("#token-strip .cfsm-chip[data-origin=jump]").count() > 5
    strip_text = page.locator("#token-strip").inner_text()
    assert "name" in strip_text and "house" in strip_text
    # the jump panel and the gauges
    assert "Jump-forward" in page.locator("#jump-panel").inner_text()
    page.wait_for_selector("#gauges .js-plotly-plot", timeout=20_000)
    assert "passes saved vs masked" in page.locator("#gauges").inner_text()
    page.screenshot(path=str(ARTIFACTS / "step-view-scrubbed.png"), full_page=True)


def test_compare_masked_vs_jump(page):
    page.get_by_role("tab", name="Compare").click()
    page.locator("#compare-run").click()
    page.wait_for_function("document.querySelector('#compare-table').innerText.includes('forward passes')", timeout=240_000)
    table = page.locator("#compare-table").inner_text()
    assert "masked / fsm" in table and "jump / fsm" in table
    m = re.search(r"B is ([0-9.]+)x (faster|slower)", table)
    assert m, table
    # both strips show tokens; B (jump) has jumped chips, A (masked) has none
    assert page.locator("#strip-a .cfsm-chip[data-origin]").count() > 20
    assert page.locator("#strip-a .cfsm-chip[data-origin=jump]").count() == 0
    assert page.locator("#strip-b .cfsm-chip[data-origin=jump]").count() > 5
    page.screenshot(path=str(ARTIFACTS / "compare-view.png"), full_page=True)
    page.get_by_role("tab", name="Playground").click()


def test_bad_regex_shows_a_message_and_the_app_keeps_serving(page):
    box = page.locator("#regex-input textarea")
    box.fill("(?<=a)b")
    page.wait_for_function("document.querySelector('#regex-error').innerText.includes('look-ahead')", timeout=20_000)
    page.locator("#run").click()
    page.wait_for_function("document.querySelector('#run-error').innerText.includes('unsupported_feature')", timeout=60_000)
    assert "Traceback" not in page.content()
    box.fill("(yes|no)")
    page.locator("#prompt textarea").fill("Is water wet?")  # one step: the scrubber has a single position
    page.locator("#run").click()
    page.wait_for_function("document.querySelector('#summary').innerText.includes('finished')", timeout=120_000)
    assert page.locator("#run-error").inner_text().strip() == ""


def test_test_strings_mark_where_each_text_leaves_the_language(page):
    page.locator("#regex-input textarea").fill(r"[0-9]+(\.[0-9]+)?")
    page.locator("#test-strings").click()  # open the accordion
    page.locator("#test-strings-input textarea").fill("1.5\n1.\n1x5")
    page.locator("#test-strings-run").click()
    page.wait_for_selector("#test-strings-result .ts-row", timeout=60_000)
    rows = page.locator("#test-strings-result .ts-row")
    assert rows.count() == 3
    assert "match" in rows.nth(0).inner_text()
    assert "prefix" in rows.nth(1).inner_text()
    assert "leaves at byte 1" in rows.nth(2).inner_text()
    assert rows.nth(2).locator("mark.ts-reject").inner_text() == "x"  # the character that leaves the language


def test_stop_during_a_compile_says_so_and_other_tabs_are_not_held_up(page, app_url):
    """One tab compiles a pathological regex; a second tab runs meanwhile; Stop in the first
    tab says it stopped a compile."""
    page.locator("#regex-input textarea").fill("(a|b)*a(a|b){24}")
    page.locator("#run").click()
    page.wait_for_function("document.querySelector('#summary').innerText.includes('Compiling')", timeout=60_000)
    ctx = page.context.browser.new_context(viewport={"width": 1500, "height": 1100})  # a second user
    other = ctx.new_page()
    try:
        other.goto(app_url, wait_until="domcontentloaded")
        other.wait_for_function("document.querySelector('#model-status')?.innerText.includes('Model ready')",
                                timeout=120_000)
        other.locator("#regex-input textarea").fill("The answer is (yes|no)\\.")
        other.locator("#run").click()
        other.wait_for_function("document.querySelector('#summary').innerText.includes('finished')", timeout=120_000)
        assert "The␣answer␣is" in other.locator("#token-strip").inner_text()  # spaces shown as ␣
        # the first tab is still compiling: the second did not wait for its time limit
        assert "Compiling" in page.locator("#summary").inner_text()
    finally:
        ctx.close()
    page.locator("#stop").click()
    page.wait_for_function("document.querySelector('#stop-message').innerText.includes('Stopped while compiling')",
                           timeout=20_000)
    assert "regex for fsm" in page.locator("#stop-message").inner_text()


def test_permalink_restores_inputs(page, app_url):
    import urllib.parse

    q = urllib.parse.urlencode({"kind": "regex", "c": "(red|blue) sky", "prompt": "Colour?", "mode": "masked",
                                "backend": "xgrammar", "max": 17})
    page.goto(f"{app_url}/?{q}", wait_until="domcontentloaded")
    page.wait_for_function("document.querySelector('#regex-input textarea')?.value === '(red|blue) sky'", timeout=60_000)
    assert page.locator("#prompt textarea").input_value() == "Colour?"
    assert page.locator("#mode input[value=masked]").is_checked()


def test_lenient_checkbox_turns_a_refusal_into_a_warning(page, app_url):
    import urllib.parse

    schema = '{"type": "array", "items": {"type": "integer", "maximum": 9}, "uniqueItems": true, "maxItems": 3}'
    q = urllib.parse.urlencode({"kind": "schema", "c": schema, "prompt": "Three digits as a JSON list", "mode": "jump",
                                "backend": "fsm", "max": 16})
    page.goto(f"{app_url}/?{q}", wait_until="domcontentloaded")
    page.wait_for_function("document.querySelector('#model-status')?.innerText.includes('Model ready')", timeout=120_000)
    page.wait_for_function("document.querySelector('#schema-input')?.innerText.includes('uniqueItems')", timeout=60_000)
    page.locator("#run").click()
    page.wait_for_function("document.querySelector('#run-error').innerText.includes('unsupported_feature')", timeout=60_000)
    assert "/uniqueItems" in page.locator("#run-error").inner_text()
    page.locator("#lenient input").check()
    page.locator("#run").click()
    page.wait_for_function("document.querySelector('#summary').innerText.includes('finished')", timeout=120_000)
    summary = page.locator("#summary").inner_text()
    assert "warning" in summary and "uniqueItems" in summary and "NOT enforced" in summary
    assert page.locator("#run-error").inner_text().strip() == ""


def test_api_endpoints_with_gradio_client(app_url):
    from gradio_client import Client

    c = Client(app_url + "/", verbose=False)
    rep = c.predict("regex", "(apple|apricot) pie", "compact", "fsm", api_name="/compile")
    assert rep["chains"] and rep["num_states"] > 3
    tr = c.predict("Which fruit pie?", "regex", "(apple|apricot) pie", "compact", "fsm", "jump", 16, 0.0, 0, api_name="/run")
    assert tr["text"] in ("apple pie", "apricot pie")
    assert tr["version"] == 2 and tr["jumps"]
    with pytest.raises(Exception) as ei:
        c.predict("regex", "a(b", "compact", "fsm", api_name="/compile")
    assert "invalid_regex" in str(ei.value)
    unique = '{"type": "array", "items": {"type": "integer"}, "uniqueItems": true}'
    with pytest.raises(Exception) as ei:
        c.predict("schema", unique, "compact", "fsm", api_name="/compile")
    assert "unsupported_feature" in str(ei.value) and "uniqueItems" in str(ei.value)
    rep = c.predict("schema", unique, "compact", "fsm", True, api_name="/compile")
    assert rep["warnings"] and "/uniqueItems" in rep["warnings"][0]


def test_concurrent_api_clients_decode_together(app_url):
    """Requests from several clients join one running batch; each gets its own output."""
    import threading

    from gradio_client import Client

    out = {}

    def client(i):
        c = Client(app_url + "/", verbose=False)
        out[i] = c.predict(f"Client {i}, tell a story.", "regex", rf"client {i}: [a-z]+( [a-z]+){{3,30}}", "compact",
                           "fsm", "masked", 24, 0.0, i, api_name="/run")

    threads = [threading.Thread(target=client, args=(i,)) for i in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(300)
    for i in range(3):
        assert out[i]["text"].startswith(f"client {i}: ") and out[i]["scheduler"]["kind"] == "continuous"
        assert out[i]["totals"]["output_tokens"] > 3
    assert max(s["batch_size"] for tr in out.values() for s in tr["steps"]) >= 2


def test_app_survives_a_client_that_disconnects_mid_run(app_url):
    import time

    from gradio_client import Client

    c = Client(app_url + "/", verbose=False)
    job = c.submit("Write a long story.", "regex", "[a-z ]{1,300}", "compact", "fsm", "masked", 120, 0.0, 0, api_name="/run")
    time.sleep(1.0)
    job.cancel()
    del c
    fresh = Client(app_url + "/", verbose=False)
    tr = fresh.predict("Say ok.", "regex", "(ok)", "compact", "fsm", "jump", 4, 0.0, 0, api_name="/run")
    assert tr["text"] == "ok" and tr["totals"]["finished"]
