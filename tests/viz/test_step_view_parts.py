"""A finished run's step view arrives in two parts (viz.step_bundle.split_bundle): what
position 0 draws, then the other layouts and masks. These tests hold the page's script to
it in Debian Chromium on a hand-made page (no server, no model): a position whose layout
has not arrived says so, and is drawn, current state marked, once it does."""

from __future__ import annotations

import functools
import json

import pytest

from cfsm.bench.scrub import CHROMIUM, synthetic_trace
from engine.decoding.trace import Trace
from viz.panels import duration_us
from viz.step_bundle import (
    head_html,
    positions,
    split_bundle,
    step_bundle,
    step_view_html,
    step_view_parts,
)

PATTERN = r"[a-z0-9]{1,2000}"  # 2,001 states: focus views, one layout per part of the path


@functools.lru_cache(maxsize=1)
def _trace() -> Trace:
    return synthetic_trace(PATTERN, steps=8)


def test_the_first_part_holds_what_position_0_draws_and_the_rest_the_others():
    full = step_bundle(_trace())
    first, rest = split_bundle(full)
    L0, m0 = full.steps[0].layout, full.steps[0].mask
    assert len(set(e.layout for e in full.steps)) > 1  # a run with several layouts
    assert first.layouts[L0] == full.layouts[L0]
    assert all(x is None for i, x in enumerate(first.layouts) if i != L0)
    assert first.masks[m0] == full.masks[m0]
    assert first.pending and rest["run"] == full.run
    # the two parts together are the whole bundle
    merged = list(first.layouts)
    for i, x in rest["layouts"].items():
        merged[int(i)] = x
    assert merged == full.layouts
    assert {**{k: v for k, v in first.masks.items() if v is not None}, **rest["masks"]} == (
        full.masks
    )
    # and the registered panels (viz/step_panels.py): position 0 first, the others after
    assert all(
        col[0] == full.panels[k][0] and set(col[1:]) == {None} for k, col in first.panels.items()
    )
    assert {k: [first.panels[k][0], *col[1:]] for k, col in rest["panels"].items()} == full.panels
    split = ("layouts", "masks", "panels", "pending")
    assert {k: v for k, v in vars(first).items() if k not in split} == {
        k: v for k, v in vars(full).items() if k not in split
    }
    assert not full.pending


def test_a_run_with_one_layout_and_mask_has_nothing_pending():
    trace = synthetic_trace("(yes|no)", steps=1)
    first, rest = split_bundle(step_bundle(trace))
    assert not first.pending and not rest["layouts"] and not rest["panels"]
    assert None not in first.layouts


@pytest.fixture(scope="module")
def blank_page():
    import os

    if not os.path.exists(CHROMIUM):
        pytest.skip("Debian chromium is not installed (make setup installs it)")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(
            executable_path=CHROMIUM, headless=True, args=["--no-sandbox", "--disable-gpu"]
        )
        yield browser.new_page(viewport={"width": 1400, "height": 1000})
        browser.close()


def _expected_element(trace: Trace, k: int) -> str:
    from viz.graph import graph_view

    view = graph_view(trace.automaton, True)
    return view.element(positions(trace)[k][0])


@pytest.mark.browser
def test_a_later_layout_is_drawn_once_the_rest_of_the_bundle_arrives(blank_page):
    page, trace = blank_page, _trace()
    view, rest = step_view_parts(trace)
    b = json.loads(view.split('class="cfsm-bundle">')[1].split("</script>")[0])
    # the wire form: the steps as columns (viz/bundle_shape.py)
    k = next(i for i, L in enumerate(b["steps"]["layout"]) if b["layouts"][L] is None)
    page.set_content(
        f"<html><head>{head_html()}</head><body><div id='step-view-host'>{view}</div>"
        "<div id='step-view-rest'></div></body></html>"
    )
    page.wait_for_function("document.querySelector('#step-view').dataset.step === '0'")
    assert page.locator("#fsm-graph svg g.current").get_attribute("id") == _expected_element(
        trace, 0
    )
    # a scrub to a position whose layout is still on its way: it says so, draws nothing stale
    page.evaluate(f"window.cfsm.show({k})")
    assert page.locator("#graph-loading").is_visible()
    assert page.locator("#fsm-graph svg").count() == 0
    assert page.locator("#graph-where").inner_text() == ""  # no state named for a missing graph
    assert page.locator("#mask-loading").count() == (b["masks"].get(b["steps"]["mask"][k]) is None)
    assert page.locator("[data-panel=step_cost]").inner_text() == ""  # on its way too
    # the rest of a different run changes nothing
    other = rest.replace(f'data-run="{b["run"]}"', 'data-run="another"')
    page.evaluate("(h) => { document.querySelector('#step-view-rest').innerHTML = h; }", other)
    page.wait_for_timeout(200)
    assert page.locator("#graph-loading").is_visible()
    # this run's rest: the waiting position is drawn, its current state marked, its mask shown
    page.evaluate("(h) => { document.querySelector('#step-view-rest').innerHTML = h; }", rest)
    page.wait_for_selector("#fsm-graph svg g.current")
    assert page.locator("#fsm-graph svg g.current").get_attribute("id") == _expected_element(
        trace, k
    )
    assert page.locator("#graph-loading, #mask-loading").count() == 0
    assert page.evaluate("document.querySelector('#mask-img').naturalWidth") == 256
    assert page.evaluate("document.querySelector('#step-view').dataset.step") == str(k)
    assert _cost_line(trace, k) in page.locator("[data-panel=step_cost]").inner_text()


def _cost_line(trace: Trace, k: int) -> str:
    return f"forward {duration_us(1000 * trace.steps[k].forward_ms)}"


@pytest.mark.browser
def test_a_panel_still_on_its_way_is_filled_when_the_rest_arrives(blank_page):
    """A position whose graph and mask came first, but not its registered panels: the
    panels are filled in place when the rest arrives (nothing else is drawn again)."""
    page, trace = blank_page, _trace()
    view, rest = step_view_parts(trace)
    b = json.loads(view.split('class="cfsm-bundle">')[1].split("</script>")[0])
    j = next(i for i, L in enumerate(b["steps"]["layout"]) if i > 0 and b["layouts"][L])
    page.set_content(
        f"<html><head>{head_html()}</head><body><div id='step-view-host'>{view}</div>"
        "<div id='step-view-rest'></div></body></html>"
    )
    page.wait_for_function("document.querySelector('#step-view').dataset.step === '0'")
    assert _cost_line(trace, 0) in page.locator("[data-panel=step_cost]").inner_text()
    page.evaluate(f"window.cfsm.show({j})")
    assert page.locator("#graph-loading").count() == 0
    assert page.locator("[data-panel=step_cost]").inner_text() == ""
    page.evaluate("(h) => { document.querySelector('#step-view-rest').innerHTML = h; }", rest)
    page.wait_for_function("document.querySelector('[data-panel=step_cost]').innerText !== ''")
    assert _cost_line(trace, j) in page.locator("[data-panel=step_cost]").inner_text()
    assert page.evaluate("document.querySelector('#step-view').dataset.step") == str(j)


@pytest.mark.browser
def test_a_whole_bundle_draws_every_position_at_once(blank_page):
    """Views drawn again from a kept trace (a layout toggle, Stop) carry the whole bundle."""
    page, trace = blank_page, _trace()
    page.set_content(f"<html><head>{head_html()}</head><body>{step_view_html(trace)}</body></html>")
    page.wait_for_function("document.querySelector('#step-view').dataset.step === '0'")
    last = len(trace.steps) - 1
    page.evaluate(f"window.cfsm.show({last})")
    assert page.locator("#graph-loading").count() == 0
    assert page.locator("#fsm-graph svg g.current").get_attribute("id") == _expected_element(
        trace, last
    )
