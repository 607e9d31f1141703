"""Adding a step-view panel follows docs/architecture.md: register it, and the bundle, the
view's host, the page's CSS and the live view carry it; nothing else is touched (no model)."""

import dataclasses

import pytest
from toy_panel import TOY_PANEL, tokens_so_far

from cfsm.bench.scrub import synthetic_trace
from viz.step_bundle import head_html, live_view_html, step_bundle, step_view_parts
from viz.step_panels import PANELS, StepPanel, register_panel, unregister_panel


@pytest.fixture
def toy():
    register_panel(TOY_PANEL)
    yield TOY_PANEL
    unregister_panel(TOY_PANEL.name)


def test_a_registered_panel_is_drawn_at_every_position_of_a_run(toy):
    t = synthetic_trace(r"[a-z]{3}-[0-9]{2}", steps=5)
    b = step_bundle(t)
    n = len(t.steps)
    assert b.panels[toy.name] == [tokens_so_far(t, k) for k in range(n)] + [tokens_so_far(t, None)]
    assert [x.split(">")[1].split()[0] for x in b.panels[toy.name]] == [
        str(s.output_len) for s in t.steps
    ] + [str(len(t.tokens))]
    assert len(b.panels[toy.name]) == len(b.steps)  # indexed as the script indexes steps
    view, _ = step_view_parts(t)
    assert f'<div data-panel="{toy.name}"></div>' in view  # its host, filled per position
    assert toy.css in head_html()
    # the live view carries the latest step's entry only, as it carries one step
    live = step_bundle(t, live=True)
    assert live.panels[toy.name] == [tokens_so_far(t, n - 1)]
    assert f'data-panel="{toy.name}"' in live_view_html(t)


def test_a_panel_taken_out_is_gone_and_names_are_unique(toy):
    t = synthetic_trace("(yes|no)", steps=1)
    with pytest.raises(ValueError, match="registered already"):
        register_panel(StepPanel(toy.name, tokens_so_far))
    with pytest.raises(ValueError, match="lowercase"):
        register_panel(StepPanel("Bad-Name", tokens_so_far))
    unregister_panel(toy.name)
    assert toy.name not in step_bundle(t).panels and toy.name not in PANELS
    register_panel(toy)  # the fixture takes it out again


def test_the_step_cost_panel_splits_a_step_into_forward_grammar_and_sampling():
    t = synthetic_trace("[a-z]{4}", steps=3)
    t.steps[1] = dataclasses.replace(
        t.steps[1], forward_ms=12.0, grammar_us=3000.0, mask_us=2500.0, sample_us=1000.0,
        batch_size=3,
    )  # fmt: skip
    html = step_bundle(t).panels["step_cost"][1]
    assert "This step: 16.0 ms" in html
    assert "forward 12.0 ms (75%, 3 requests in the pass)" in html
    assert "grammar 3.0 ms (19%, the mask 2.5 ms of it)" in html
    assert "sampling 1.0 ms (6%)" in html
    assert html.count('style="width:') == 3  # a bar of three shares: no jump at this step
    assert step_bundle(t).panels["step_cost"][-1] == ""  # the end position: no step
    t.mode = "replay"  # another engine's tokens: nothing here was timed
    assert step_bundle(t).panels["step_cost"][1] == ""
