"""A batch's step samples every request together (engine.decoding.sampling.select_batch
over one `[B, ceil(V/32)]` bitmask): each row must get exactly what it would alone."""

import numpy as np
import pytest
import torch

from engine.decoding.request import GenerateRequest
from engine.decoding.sampling import SamplePack, pack_sizes, select_batch
from engine.tokens.bitmask import full_row, pack_bool, pack_ids, pack_tensor, popcount, unpack


@pytest.mark.parametrize("vocab", [1, 31, 32, 33, 1000, 49152])
def test_a_bitmask_row_holds_exactly_its_ids_at_any_vocabulary_size(vocab):
    rng = np.random.default_rng(vocab)
    for _ in range(5):
        ids = np.unique(rng.integers(0, vocab, size=rng.integers(0, vocab + 1)))
        ids = np.union1d(ids, [vocab - 1]) if vocab >= 32 else ids  # the last word's top bits
        row = pack_ids(ids, vocab)
        assert row.dtype == np.int32 and len(row) == (vocab + 31) // 32
        assert np.flatnonzero(unpack(torch.from_numpy(row), vocab).numpy()).tolist() == list(ids)
        assert popcount(row) == len(ids)
        dense = np.zeros(vocab, dtype=bool)
        dense[ids] = True
        assert np.array_equal(pack_bool(dense), row)
        assert torch.equal(pack_tensor(torch.from_numpy(dense)), torch.from_numpy(row))
    assert unpack(full_row(vocab, "cpu"), vocab).all()


def _req(**kw) -> GenerateRequest:
    return GenerateRequest(**{"prompt": "x", "mode": "masked", **kw})


def test_a_batch_samples_each_row_as_it_would_alone():
    """Greedy and sampled rows, with and without the step view's details, masked and not:
    a row's pick and every number of its pack equal those of a batch of one."""
    torch.manual_seed(1)
    v = 3000
    reqs = [
        _req(),
        _req(trace_detail=False),
        _req(temperature=0.8, seed=3),
        _req(temperature=1.1, top_p=0.7, seed=5, top_k=3),
        _req(mode="free", trace_detail=False),
    ]
    logits = torch.randn(len(reqs), v) * 4
    rows, masked = [], []
    for i in range(len(reqs)):
        if reqs[i].mode == "free":
            rows.append(full_row(v, "cpu"))
            masked.append(False)
            continue
        ids = np.unique(np.random.default_rng(i).integers(0, v, size=40 * (i + 1)))
        rows.append(torch.from_numpy(pack_ids(ids, v)))
        masked.append(True)
    sizes = [pack_sizes(r, m, v) for r, m in zip(reqs, masked, strict=True)]

    def gens():
        return [torch.Generator().manual_seed(r.seed) for r in reqs]

    together = select_batch(logits, torch.stack(rows), reqs, gens(), sizes).tolist()
    g = gens()
    for i, r in enumerate(reqs):
        alone = select_batch(logits[i : i + 1], rows[i][None], [r], [g[i]], [sizes[i]])
        a = SamplePack.read(together[i], *sizes[i])
        b = SamplePack.read(alone[0].tolist(), *sizes[i])
        assert a == b, i
        allowed = unpack(rows[i], v)
        assert allowed[a.token_id], "the pick is an allowed token"
        if r.temperature <= 0:
            want = int(torch.argmax(logits[i].masked_fill(~allowed, float("-inf"))))
            assert a.token_id == want
        assert len(a.masked_top) == sizes[i][1] and len(a.raw_top) == sizes[i][0]
    # free text keeps its unmasked top-k (the same list), the others only with details on
    assert sizes[1][0] == 0 and sizes[4][0] == sizes[4][1] > 0
