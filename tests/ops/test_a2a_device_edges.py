"""Edge cases of :func:`ditron.ops.all_to_all_device`: what the splits may be, and huge
splits on one rank."""

from __future__ import annotations

import pytest
import torch

import ditron

from .poison import poison_empty


def check_huge_splits() -> list:
    """Rank 0 passes splits far past its 4 rows (the running sum of the raw values
    overflows int64); the others send one row to each rank."""
    w, me, dev = ditron.world().world_size, ditron.world().rank, ditron.world().device
    poison_empty()
    x = (torch.arange(4, dtype=torch.float32, device=dev) + 10 * me).view(4, 1)
    splits = torch.full((w,), 2**62, device=dev) if me == 0 else torch.ones(w, device=dev,
                                                                            dtype=torch.int64)
    out, out_splits = ditron.ops.all_to_all_device(x, splits, 8, zero_missing=True)
    return [out_splits.tolist(), out[:, 0].tolist()]


def test_huge_splits_are_cut_without_overflow(backend):
    """Rank 0's splits of 2**62 summed past int64 on the device: ranks 1 and 2 reported
    garbage counts (9223372036854775804, 2**62) and lost the rows of every rank."""
    r0, r1, r2 = ditron.launch(check_huge_splits, 3, backend=backend)
    assert r0 == [[4, 1, 1], [0.0, 1.0, 2.0, 3.0, 10.0, 20.0, 0.0, 0.0]]
    assert r1 == [[0, 1, 1], [11.0, 21.0] + [0.0] * 6]
    assert r2 == [[0, 1, 1], [12.0, 22.0] + [0.0] * 6]


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
