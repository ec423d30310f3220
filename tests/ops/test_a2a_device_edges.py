"""Edge cases of :func:`ditron.ops.all_to_all_device`: what the splits may be, and huge
splits on one rank."""

from __future__ import annotations

import pytest
import torch
import torch.distributed as dist

import ditron
from ditron.runtime.world import current

from .poison import poison_empty


def _cut(splits: list[int], rows: int) -> list[int]:
    """The rows each split sends (the documented rule): a negative split sends nothing,
    splits past the send rows are cut to the rows left."""
    sent, left = [], rows
    for s in splits:
        sent.append(min(max(s, 0), left))
        left -= sent[-1]
    return sent


def check_huge_splits(calls: int = 2) -> list:
    """Rank 0 passes splits far past its rows (the running sum of the raw values overflows
    int64), rank 1 a negative split and one past its rows, the others one row to each rank:
    fresh random rows, repeated calls, against ``dist.all_to_all_single`` of the cut
    splits; rows past the received ones are zero (``zero_missing``)."""
    w, me, dev = ditron.world().world_size, ditron.world().rank, ditron.world().device
    poison_empty()
    host = current().host_group
    got = []
    for it in range(calls):
        rows = 4 + it
        g = torch.Generator().manual_seed(100 * it + me)
        x = torch.randn(rows, 3, generator=g)
        raw = [2**62] * w if me == 0 else [-5, rows + 1] + [1] * (w - 2) if me == 1 else [1] * w
        ins = torch.tensor(_cut(raw, rows))
        outs = torch.empty_like(ins)
        dist.all_to_all_single(outs, ins, group=host)
        ref = torch.empty(int(outs.sum()), 3)
        dist.all_to_all_single(ref, x[: int(ins.sum())], outs.tolist(), ins.tolist(),
                               group=host)
        out, out_splits = ditron.ops.all_to_all_device(x.to(dev), torch.tensor(raw).to(dev),
                                                       8, zero_missing=True)
        n = int(outs.sum())
        assert torch.equal(out_splits.cpu(), outs), (it, out_splits, outs)
        assert torch.equal(out[:n].cpu(), ref), f"call {it}: rows differ"
        assert torch.equal(out[n:].cpu(), torch.zeros(8 - n, 3)), f"call {it}: not zero"
        got.append(out_splits.tolist())
    return got


def test_huge_splits_are_cut_without_overflow(backend):
    """Rank 0's splits of 2**62 summed past int64 on the device: ranks 1 and 2 reported
    garbage counts (9223372036854775804, 2**62) and lost the rows of every rank."""
    got = ditron.launch(check_huge_splits, 3, backend=backend)
    # rank 0 sends every row to rank 0, rank 1 its rows to rank 1, rank 2 one to each
    assert got == [[[4, 0, 1], [5, 0, 1]], [[0, 4, 1], [0, 5, 1]], [[0, 0, 1]] * 2]


def check_split_types() -> list:
    """Splits that are not integer tensors are refused with a clear error, on every rank."""
    w, dev = ditron.world().world_size, ditron.world().device
    x = torch.zeros(2 * w, 2, device=dev)
    got = []
    for splits, kind in (([2] * w, TypeError), (torch.ones(w, dtype=torch.bool), ValueError),
                         (torch.ones(w, dtype=torch.complex64), ValueError)):
        with pytest.raises(kind, match="splits"):
            ditron.ops.all_to_all_device(x, splits.to(dev) if torch.is_tensor(splits)
                                         else splits, 2 * w)
        got.append(kind.__name__)
    with pytest.raises(TypeError, match="torch.Tensors"):
        ditron.ops.all_to_all_device(x.tolist(), torch.ones(w, dtype=torch.int64), 2 * w)
    # int32 splits, strided, still work afterwards
    splits = torch.full((2 * w,), 2, dtype=torch.int32, device=dev)[::2]
    _, out_splits = ditron.ops.all_to_all_device(x, splits, 2 * w)
    got.append(out_splits.tolist())
    return got


def test_splits_must_be_an_integer_tensor(backend):
    """A list raised AttributeError ('list' object has no attribute 'device'); bool and
    complex splits were taken as counts (True as 1, complex cast with a warning)."""
    got = ditron.launch(check_split_types, 2, backend=backend)
    assert got == [["TypeError", "ValueError", "ValueError", [2, 2]]] * 2
