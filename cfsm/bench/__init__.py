"""Benchmark suites, one module each; `SUITES` is the registry `cfsm bench NAME` is built
from (each module declares its `Suite`: name, flags, run, table, report)."""

from __future__ import annotations

from . import (
    adversarial,
    api,
    batch,
    bitmask,
    busy,
    check_requests,
    compare,
    conformance,
    decode,
    doctor_sample,
    figures,
    jsonschemabench,
    kv_pressure,
    live_view,
    page_busy,
    page_run,
    peers,
    replay,
    schemas_api,
    scrub,
    tokenizers,
    triggers,
    vocab,
)
from .suite import Suite

SUITES: dict[str, Suite] = {
    s.name: s
    for s in (
        decode.PAPER_CHARACTER,
        decode.PAPER,
        batch.SUITE,
        bitmask.SUITE,
        jsonschemabench.SUITE,
        doctor_sample.SUITE,
        schemas_api.SUITE,
        conformance.SUITE,
        peers.SUITE,
        tokenizers.SUITE,
        triggers.SUITE,
        adversarial.SUITE,
        scrub.SUITE,
        page_run.SUITE,
        page_busy.SUITE,
        live_view.SUITE,
        kv_pressure.SUITE,
        check_requests.SUITE,
        figures.SUITE,
        busy.SUITE,
        api.SUITE,
        replay.SUITE,
        compare.SUITE,
        vocab.SUITE,
    )
}
DEFAULT_SUITE = "paper-character"
