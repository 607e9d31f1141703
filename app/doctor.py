"""The Doctor tab: the Playground's constraint diagnosed (samples synthesized from the
automaton, or written by the model from the prompt)."""

from __future__ import annotations

from engine.errors import CfsmError
from viz.summaries import doctor_md, doctor_plot

from .checks import error_line, for_the_page
from .inputs import PageInputs
from .layout import Doctor, Playground
from .state import DECODE_SLOTS, EngineHub, check_page_model


def wire_doctor(ui: Playground, doc: Doctor, hub: EngineHub) -> None:
    def do_doctor(values: dict):
        try:
            inp = PageInputs.read(ui, values)
            c = inp.constraint()
            if c.kind == "grammar":
                raise CfsmError(
                    "unsupported_feature",
                    "the doctor needs a regex or a JSON schema: a grammar has "
                    "no finite automaton to analyse",
                )
            eng = hub.get(check_page_model(inp.model))
            prompt = (inp.prompt or "") if values[doc.with_model] else None
            rep = eng.diagnose(c, prompt, int(values[doc.samples]))
            return "", doctor_md(page_report(rep), c.text), doctor_plot(rep)
        except BaseException as exc:  # noqa: BLE001
            return error_line(exc), "", None

    doc.btn.click(
        do_doctor,
        PageInputs.widgets(ui, doc.samples, doc.with_model),
        [doc.err, doc.md, doc.plot],
        concurrency_limit=DECODE_SLOTS,
        concurrency_id="decode",
    )


def page_report(rep: dict) -> dict:
    """The doctor's report with the CLI flags in its what-if rows named as the page's
    controls ("JSON Schema's own reading (--spec: ...)" is the Spec reading box here)."""
    rows = [
        {k: for_the_page(v) if isinstance(v, str) else v for k, v in w.items()}
        for w in rep.get("what_if") or []
    ]
    causes = [{**c, "suggestion": for_the_page(c.get("suggestion") or "")}
              for c in rep.get("causes") or []]  # fmt: skip
    return {**rep, "what_if": rows, "causes": causes}
