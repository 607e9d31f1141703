"""The Compare tab: the Playground's inputs run twice, side A and side B (each its own
mode, backend and whitespace; both whitespace settings take the Playground's whenever it
changes, and either can then be set here),
and the two runs set side by side, outputs as text with their first difference marked."""

from __future__ import annotations

from viz.panels import token_strip
from viz.summaries import compare_md

from .checks import error_line
from .inputs import PageInputs
from .layout import Compare, Playground
from .state import DECODE_SLOTS, EngineHub, check_page_model


def wire_compare(ui: Playground, cmp: Compare, hub: EngineHub) -> None:
    sides = ((cmp.mode_a, cmp.backend_a, cmp.ws_a), (cmp.mode_b, cmp.backend_b, cmp.ws_b))

    def do_compare(values: dict):
        try:
            inp = PageInputs.read(ui, values)
            eng = hub.get(check_page_model(inp.model))
            reqs, configs = inp.compare_requests([[values[x] for x in side] for side in sides])
            # each side from the same cache state (a free run's prompt is not always the
            # constrained one's)
            a, b = eng.side_by_side(*reqs)
            md = compare_md(a, b, *configs, float(inp.temp), int(inp.seed or 0))
            return "", md, token_strip(a), token_strip(b)
        except BaseException as exc:  # noqa: BLE001
            return error_line(exc), "", "", ""

    # the Playground's whitespace is the one both sides start from (a preset's point, such
    # as flexible against compact whitespace, carries over); each side can still change it
    ui.ws.change(lambda w: (w, w), ui.ws, [cmp.ws_a, cmp.ws_b], queue=False)
    cmp.btn.click(
        do_compare,
        PageInputs.widgets(ui, *(x for side in sides for x in side)),
        [cmp.err, cmp.table, cmp.strip_a, cmp.strip_b],
        concurrency_limit=DECODE_SLOTS,
        concurrency_id="decode",
    )
