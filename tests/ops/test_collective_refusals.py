"""Collective calls that must be refused on every rank before anything moves, and the
good call after them still right (fresh seeded inputs; every rank makes every rank's, so
references are plain torch):

- a ``bool`` max / min on one rank against a ``uint8`` one on another (bools move as
  ``uint8``: the agreement must still see two dtypes, or the bool rank gets bytes that are
  no bools);
- ``all_to_all`` split sizes that are not a sequence, or past int64 (the host gather
  packs them in int64 rows: one rank failed there alone);
- an ``out`` that is a conjugate view torch cannot write (an inference tensor outside
  ``torch.inference_mode``, an expanded one): refused like the plain tensor, not found
  only when the result is copied back after the transfer.

``DITRON_CHECK_CALLS=1``: every call is checked, so a rank refusing its arguments tells
its peers on any call (``runtime/agreement.py``)."""

from __future__ import annotations

import pytest
import torch

import ditron
from ditron import ops

SEED = 4321


def _raises(match: str, call, /, *args, **kwargs) -> str:
    """The message of the ``ValueError`` that ``call(*args, **kwargs)`` raises (fails unless
    it does)."""
    with pytest.raises(ValueError, match=match) as info:
        call(*args, **kwargs)
    return str(info.value)


def _bools(rank: int, it: int, n: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(SEED + 10 * rank + it)
    return torch.rand(n, generator=g) < 0.5


def check_bool_against_uint8() -> int:
    w, me = ditron.world().world_size, ditron.world().rank
    dev = ditron.world().device
    checks = 0
    for it, op in enumerate(("max", "min")):
        mine = _bools(me, it, 3 * w)
        bad = mine.to(torch.uint8) * 7 if me == w - 1 else mine  # 0 or 7: no bools
        _raises("dtype differs", ops.all_reduce, bad.to(dev), op=op)
        _raises("dtype differs", ops.reduce_scatter, bad.to(dev), op=op)
        every = torch.stack([_bools(r, it, 3 * w) for r in range(w)])
        ref = every.any(0) if op == "max" else every.all(0)
        got = ops.all_reduce(mine.to(dev), op=op).cpu()
        assert got.dtype == torch.bool and torch.equal(got, ref), (op, got, ref)
        assert got.view(torch.uint8).max() <= 1, f"{op}: bytes that are no bools"
        got = ops.reduce_scatter(mine.to(dev), op=op).cpu()
        assert torch.equal(got, ref.chunk(w)[me]), (op, got, ref)
        checks += 4
    return checks


@pytest.mark.parametrize("world_size", [2, 3])
def test_bool_and_uint8_reductions_disagree(world_size, backend, monkeypatch):
    monkeypatch.setenv("DITRON_CHECK_CALLS", "1")
    assert ditron.launch(check_bool_against_uint8, world_size, backend=backend) == \
        [8] * world_size


def _rows(rank: int, rows: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(SEED + 100 + rank)
    return torch.randn(rows, 3, generator=g)


def check_split_sizes() -> int:
    w, me = ditron.world().world_size, ditron.world().rank
    dev = ditron.world().device
    x = _rows(me, 2 * w).to(dev)
    last = me == w - 1
    cases = [  # (this rank's in_splits, out_splits): bad on the last rank only
        ([2] * w, [2**63] + [2] * (w - 1) if last else [2] * w),
        ([2] * w, [2**64] + [2] * (w - 1) if last else [2] * w),
        (2 if last else [2] * w, None),
        (torch.tensor(2) if last else [2] * w, None),
        ([2] * w, 2 if last else [2] * w),
    ]
    for ins, outs in cases:
        message = _raises("ditron.ops.all_to_all", ops.all_to_all, x, ins, outs)
        if last:
            assert "non-negative int sizes (below 2**63)" in message, message
        else:
            assert f"rank {w - 1}" in message and "refused" in message, message
    ref = torch.cat([_rows(r, 2 * w)[2 * me: 2 * me + 2] for r in range(w)])
    assert torch.equal(ops.all_to_all(x, [2] * w, [2] * w).cpu(), ref)
    return len(cases) + 1


@pytest.mark.parametrize("world_size", [2, 3])
def test_all_to_all_split_sizes_refused_on_every_rank(world_size, backend, monkeypatch):
    monkeypatch.setenv("DITRON_CHECK_CALLS", "1")
    assert ditron.launch(check_split_sizes, world_size, backend=backend) == [6] * world_size


def _complex(rank: int, it: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(SEED + 200 + 10 * rank + it)
    return torch.randn(2, 3, dtype=torch.complex64, generator=g)


def check_unwritable_conjugate_out() -> int:
    w, me = ditron.world().world_size, ditron.world().rank
    dev = ditron.world().device
    last = me == w - 1
    with torch.inference_mode():
        made_inside = torch.zeros(2 * w, 3, dtype=torch.complex64, device=dev)
    expanded = torch.zeros(2 * w, 1, dtype=torch.complex64, device=dev).expand(2 * w, 3)
    checks = 0
    for it, (bad, words) in enumerate([(made_inside, "made under torch.inference_mode"),
                                       (expanded, "share memory")]):
        x = _complex(me, it).to(dev)
        good = torch.zeros(2 * w, 3, dtype=torch.complex64, device=dev).conj()
        out = bad.conj() if last else good
        message = _raises("ditron.ops.all_gather", ops.all_gather, x, out=out)
        assert words in message, message
        assert last or "refused" in message, message
        got = ops.all_gather(x, out=good)
        assert got is good and got.is_conj()
        ref = torch.cat([_complex(r, it) for r in range(w)])
        assert torch.equal(got.cpu(), ref), it
        checks += 2
    return checks


@pytest.mark.parametrize("world_size", [2, 3])
def test_unwritable_conjugate_out_refused_before_moving(world_size, backend, monkeypatch):
    monkeypatch.setenv("DITRON_CHECK_CALLS", "1")
    assert ditron.launch(check_unwritable_conjugate_out, world_size, backend=backend) == \
        [4] * world_size
