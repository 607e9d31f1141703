"""`cfsm bench bitmask`: one decoding step's masking and sampling for a batch, per
vocabulary size and batch size, on the chosen device. Side by side in one run:

* batched (what the scheduler runs): the batch's cached bitmask rows stacked, one
  `select_batch`, one host transfer;
* per request (what it replaced): each row unpacked to a boolean mask on the host, copied
  to the device and sampled alone, then one transfer;
* xgrammar's own `apply_token_bitmask_inplace` on the same bitmask, masking only (no
  sampling, no trace numbers): the library kernel's time for reference.

Every path picks the same greedy tokens (checked). No model: random logits, random
allowed sets of a tenth of the vocabulary."""

from __future__ import annotations

import statistics
import time

import numpy as np

from engine.decoding.request import GenerateRequest
from engine.decoding.sampling import pack_sizes, select_batch
from engine.lazy import lazy_module
from engine.tokens.bitmask import pack_ids, unpack_bitmask

from .suite import Flag, Suite

torch = lazy_module("torch")


def _sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def _timed(fn, device: str, reps: int) -> tuple[float, object]:
    out, got = [], None
    for _ in range(reps):
        _sync(device)
        t = time.perf_counter()
        got = fn()
        _sync(device)
        out.append((time.perf_counter() - t) * 1e6)
    return round(statistics.median(out), 1), got


def _per_request(logits, host_rows: list[np.ndarray], vocab: int, k: int, device: str):
    """The replaced path: a host unpack and a V-byte copy per request, one row at a time."""
    packs = []
    for i, row in enumerate(host_rows):
        mask = torch.from_numpy(unpack_bitmask(row, vocab)).to(device)
        probs = torch.softmax(logits[i].float(), -1)
        kept = torch.where(mask, probs, -1.0)
        mv, mi = torch.topk(kept, k)
        packs.append(torch.cat([mi[:1].float(), (probs * mask).sum().view(1), mv, mi.float()]))
    return [int(p[0]) for p in torch.stack(packs).tolist()]


def _xgrammar(logits, bits):
    import xgrammar as xgr

    xgr.apply_token_bitmask_inplace(logits, bits)
    return logits


def measure(vocab: int, batch: int, device: str, reps: int) -> dict:
    rng = np.random.default_rng(vocab + batch)
    host_rows = [
        pack_ids(np.unique(rng.integers(0, vocab, vocab // 10)), vocab) for _ in range(batch)
    ]
    rows = [torch.from_numpy(r).to(device) for r in host_rows]  # cached per state, as fsm's
    logits = torch.randn(batch, vocab, device=device)
    reqs = [GenerateRequest(prompt="x", mode="masked", trace_detail=False) for _ in rows]
    gens = [torch.Generator(device=device).manual_seed(0) for _ in rows]
    sizes = [pack_sizes(r, True, vocab) for r in reqs]

    def batched():
        got = select_batch(logits, torch.stack(rows), reqs, gens, sizes).tolist()
        return [int(v[0]) for v in got]

    us_b, picks_b = _timed(batched, device, reps)
    us_r, picks_r = _timed(
        lambda: _per_request(logits, host_rows, vocab, sizes[0][1], device), device, reps
    )
    if picks_b != picks_r:
        raise RuntimeError(f"the paths picked differently at V={vocab}, B={batch}")
    row = {"vocab": vocab, "batch": batch, "batched_us": us_b, "per_request_us": us_r}
    try:
        bits = torch.stack(rows)
        row["xgrammar_apply_us"] = _timed(lambda: _xgrammar(logits.clone(), bits), device, reps)[0]
    except Exception as exc:  # noqa: BLE001 - a reference only: say why it is missing
        row["xgrammar_apply_us"] = None
        row["xgrammar_note"] = " ".join(str(exc).split())[:160]
    return row


def run(args, log=print) -> dict:
    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    rows = []
    for vocab in (int(v) for v in args.vocab_sizes.split(",")):
        for batch in (int(b) for b in args.batch_sizes.split(",")):
            rows.append(measure(vocab, batch, device, args.reps))
            r = rows[-1]
            log(f"V={vocab} B={batch}: batched {r['batched_us']} us, per request "
                f"{r['per_request_us']} us, xgrammar {r['xgrammar_apply_us']} us")  # fmt: skip
    return {"suite": "bitmask", "device": device, "torch_threads": torch.get_num_threads(),
            "rows": rows}  # fmt: skip


def table(res: dict) -> str:
    lines = [
        f"one step's mask and sampling on {res['device']} (median us)",
        "| vocabulary | batch | batched | per request | xgrammar apply (mask only) |",
        "|---:|---:|---:|---:|---:|",
    ]
    for r in res["rows"]:
        lines.append(
            f"| {r['vocab']} | {r['batch']} | {r['batched_us']} | {r['per_request_us']} | "
            f"{r['xgrammar_apply_us'] if r['xgrammar_apply_us'] is not None else '-'} |"
        )
    return "\n".join(lines)


SUITE = Suite(
    name="bitmask",
    help="one step's bitmask and sampling for a batch: batched vs per request vs xgrammar",
    run=run,
    table=table,
    flags=(
        Flag("--vocab-sizes", {"default": "1024,49152,151936"}),
        Flag("--batch-sizes", {"default": "1,8,32"}),
        Flag("--reps", {"type": int, "default": 30}),
        Flag("--device", {"default": None, "help": "cuda when present, else cpu"}),
    ),
    model=False,
)
