"""The doctor's report: `diagnose` gathers samples, causes, what-ifs and timing into one
typed `DoctorReport` (its `to_json()` is what the CLI prints and the page renders)."""

from __future__ import annotations

from dataclasses import asdict, dataclass

from ...constraint import Constraint
from ...errors import CfsmError
from ...regex.compressed import compressed_of
from ...regex.dfa import CharDFA, build_char_dfa
from ...schema.pointer import walkable
from ..unbounded import unbounded_parts
from ..untyped import untyped_places
from .causes import BOUNDARY, CAUSES, analyse_samples, suggestion
from .samples import synthesize
from .timing import ideal_time, tokenizer_reach
from .what_if import Automaton, _schema_what_ifs


@dataclass
class DoctorReport:
    """Everything the doctor found for one constraint. Crosses into viz/ and the CLI as
    `to_json()` (plain JSON, as a trace does); the parts are dicts in the shape documented
    in docs/playground.md."""

    constraint: dict  # kind, whitespace
    unbounded: list[dict]  # parts a run may never leave (where, what, bound)
    untyped: list[dict]  # nodes whose keywords imply a type they do not state (where, what, fix)
    fsm: dict  # the compressed FSM's statistics
    samples: dict  # count, source (model or synthesized), the first texts
    ideal_reduction: float  # all tokens / tokens the model chooses
    total_tokens: int
    model_tokens: int
    per_sample: list[dict]
    causes: list[dict]  # cause, title, share, tokens, why, suggestion, places
    token_boundaries: dict  # the same shape, for tokens that also carry forced text
    what_if: list[dict]  # change, advice, predicted ideal, verdict
    threshold: int  # the jump threshold the ideal assumed
    tokenizer: dict | None  # how far the tokenizer reaches into forced text
    time: dict | None  # the ideal as time on the runtime's measured costs
    runtime_note: str = ""  # why the runtime is not the one auto would pick, if so

    def to_json(self) -> dict:
        out = asdict(self)
        if not self.runtime_note:
            del out["runtime_note"]
        return out


def diagnose(
    constraint: Constraint,
    tokenizer,
    token_bytes,
    samples: list[str] | None = None,
    n: int = 8,
    seed: int = 0,
    threshold: int = 1,
    dfa: CharDFA | None = None,
    costs: dict | None = None,
    automaton: Automaton = None,
    what_if_s: float = 15.0,
    instances: list | None = None,
) -> DoctorReport:
    """The report behind `cfsm doctor` and the Doctor tab. With the runtime's `costs`
    (a CostModel's JSON and its runtime's name), the ideal is also given as time. The
    what-ifs' automata come from `automaton` (the engine's compile cache: killable, time
    limited), all within `what_if_s`. `instances`: documents the user holds (a record's
    valid instances, a file), checked against each what-if as the samples are."""
    if constraint.kind == "grammar":
        raise CfsmError(
            "unsupported_feature",
            "the doctor needs a regex or JSON schema (grammars have no finite automaton)",
        )
    is_schema = constraint.kind == "schema"
    pattern = constraint.regex() or ""
    dfa = dfa or build_char_dfa(pattern)
    cf = compressed_of(dfa)
    source = "model" if samples else "synthesized"
    texts = [t for t in (samples or []) if dfa.accepts(t)] or synthesize(dfa, n, seed)
    if not texts:
        raise CfsmError("unsatisfiable", "could not produce any sample output for this constraint")
    res = analyse_samples(
        dfa,
        texts,
        tokenizer,
        token_bytes,
        is_schema,
        threshold,
        None if is_schema else constraint.text,
        walkable(constraint.text) if is_schema else None,
    )
    total = max(1, res["model_tokens"])
    causes = []
    schema = walkable(constraint.text) if is_schema else None
    for key, cnt in res["causes"].most_common():
        title, why, _fix = CAUSES[key]
        places = [p for p, _ in res["places"][key].most_common(5)]
        causes.append(
            {
                "cause": key,
                "title": title,
                "share": round(cnt / total, 3),
                "tokens": cnt,
                "why": why,
                "suggestion": suggestion(key, places, schema),
                "places": places,
            }
        )
    boundary = {
        "cause": "token_boundaries",
        "title": BOUNDARY[0],
        "share": round(res["boundary_tokens"] / total, 3),
        "tokens": res["boundary_tokens"],
        "why": BOUNDARY[1],
        "suggestion": BOUNDARY[2],
        "places": [],
    }
    measure = (tokenizer, token_bytes, n, seed, threshold, source == "synthesized")
    what_if = (
        _schema_what_ifs(constraint, texts, res, measure, causes, automaton, what_if_s, instances)
        if is_schema
        else []
    )

    return DoctorReport(
        constraint={"kind": constraint.kind, "whitespace": constraint.whitespace},
        unbounded=unbounded_parts(constraint),
        untyped=untyped_places(constraint),
        fsm=cf.stats(),
        samples={"count": res["samples"], "source": source, "texts": texts[:3]},
        ideal_reduction=res["ideal_reduction"],
        total_tokens=res["total_tokens"],
        model_tokens=res["model_tokens"],
        per_sample=res["per_sample"],
        causes=causes,
        token_boundaries=boundary,
        what_if=what_if,
        threshold=threshold,
        tokenizer=tokenizer_reach(tokenizer, texts),
        time=ideal_time(res["total_tokens"], res["model_tokens"], costs),
    )
