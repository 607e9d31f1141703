"""The step view's bundle, declared: what `viz.step_bundle` builds and what the page's
script (viz/static/step_view.js) reads, field by field. tests/viz/test_bundle_shape.py
holds the script to these names (every field it reads is declared here, and every field
declared is read), so the two sides cannot drift apart silently.

On the wire the steps go as columns (`{"caption": [...], "offset": [...], ...}`), each
name once however many steps a run has; the script turns them back into one object per
position when the bundle arrives. Readable names cost nothing that way: the bundle is no
larger than the one-letter keys of the rows it replaced."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from typing import Any


@dataclass
class StepEntry:
    """One position of a run (a step, or the end): what the page shows there."""

    caption: str  # HTML: what happened at this step and why
    offset: int  # output characters written before this position
    jump_html: str = ""  # the jump panel (HTML); "" draws the run's no-jump text
    jumps_done: int = 0  # jumps made up to here (their edges are marked jumped)
    element: str | None = None  # the graph element marked current (a state or a chain)
    state: int | None = None  # the automaton's state
    position: str = ""  # where the state lies (inside a chain, past the drawn path ...)
    place: str = ""  # its place in the schema, in words
    pointer: str = ""  # and as a JSON pointer the schema has
    layout: int = 0  # the index of the graph layout that draws it
    trail_index: int = 0  # path elements walked before it (marked as the path so far)
    mask: str | None = None  # the key of its allowed-token mask ("*": everything)
    token_id: int | None = None  # the token chosen at this step
    allowed: int | None = None  # how many tokens the mask allowed
    feasible_mass: float | None = None  # the model's probability inside the mask
    allowed_sample: list[list] | None = None  # [id, text, p, next state, element], best first
    top: list[list] | None = None  # [text, id, p model (None: below its top-k), p masked]
    free: bool = False  # free decoding: nothing is masked
    segment_note: str | None = None  # outside every constrained segment: why
    no_mask: bool = False  # in free text of a triggered run: no mask recorded


STEP_FIELDS = tuple(f.name for f in fields(StepEntry))


@dataclass
class StepBundle:
    """Everything the page needs to show any position of a run."""

    run: str  # this view's id (the second part of a split bundle names it)
    n: int  # the run's steps (positions 0..n-1; position n is the end)
    vocab: int
    mask_width: int  # pixels per row of a mask image
    text: str  # the output
    layouts: list[str | None]  # SVG layouts (None: in the bundle's second part)
    note: str  # a note about the graph shown (focus views instead of the whole ...)
    trail: list[str]  # the graph elements of the output's path, in order
    jumps: list[list[str]]  # each jump's edges
    masks: dict[str, str | None]  # mask key -> PNG data URI (None: in the second part)
    no_jump: str  # the jump panel's text where no jump happened
    replay: bool  # another engine's output walked through the automaton
    outline: list[list]  # a schema run's pointers: [pointer, model, forced, jumped]
    mark_css: str  # the marks' CSS, for a downloaded SVG
    steps: list[StepEntry] = field(default_factory=list)
    # the registered panels' HTML (viz/step_panels.py): name -> one entry per position, as
    # `steps` ("" hides the panel there)
    panels: dict[str, list[str]] = field(default_factory=dict)
    live: bool = False  # a decoding run's latest step only (step n - 1)
    pending: bool = False  # layouts or masks still to come (the second part)

    def to_json(self) -> dict[str, Any]:
        """The wire form: the steps as columns, one list per field; a field unset at every
        position (None, False or "") is left out, and the script reads it as undefined."""
        out = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "steps"}
        rows = [asdict(e) for e in self.steps]
        cols = {name: [r[name] for r in rows] for name in STEP_FIELDS}
        out["steps"] = {k: v for k, v in cols.items() if not all(map(_unset, v))}
        return out


def _unset(v: Any) -> bool:
    return v is None or v is False or (isinstance(v, str) and not v)
