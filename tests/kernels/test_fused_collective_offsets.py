"""The fused collective kernel's element offsets past 2**31 (``kernels/fused_collective.py``).

A launch's segments of ``x`` (reduce-scatter, all-to-all) or rank blocks of ``out``
(all-gather, all-to-all) lie ``stride`` elements apart; with three ranks, block 2 of a
stride just above 2**30 starts past 2**31, which int32 offsets wrapped to a negative one
(the all-gather stored 2 GB before ``out``: SIGSEGV, or another buffer overwritten). The
large tensors are ``torch.empty`` and only the few pages a launch reads or writes are
touched, so each rank commits a few MB.
"""

from __future__ import annotations

import torch

import ditron
from ditron.kernels import fused_collective as kfc
from ditron.ops import fused_launch
from ditron.runtime.world import current

COLS = 1000  # elements of a segment (or of the all-gather's piece) in one launch
STRIDE = 2**30 + 4096  # segments / rank blocks this far apart


def _values(rank: int, segment: int, seed: int) -> torch.Tensor:
    """Rank ``rank``'s ``COLS`` elements of segment ``segment`` (small: int8 sums fit)."""
    g = torch.Generator().manual_seed(seed + 100 * rank + segment)
    return torch.randint(-20, 20, (COLS,), generator=g, dtype=torch.int8)


def _launch(x: torch.Tensor, out: torch.Tensor, mode: int, **kw) -> None:
    variant = fused_launch.fused_variant(COLS, "cpu", mode)
    ws = fused_launch.workspace(torch.int8, mode, COLS * ditron.world().world_size, variant)
    kfc.launch(x, out, ws, mode, current().context(), variant.block, variant.num_warps, **kw)


def _rank_far_blocks(seed: int) -> list[str]:
    me, w = ditron.world().rank, ditron.world().world_size
    bad = []
    # all-gather: a piece of COLS elements, rank blocks of out STRIDE apart
    out = torch.empty((w - 1) * STRIDE + COLS, dtype=torch.int8)
    for q in range(w):
        out[q * STRIDE:q * STRIDE + COLS] = 127
    _launch(_values(me, 0, seed), out, kfc.ALL_GATHER, stride=STRIDE)
    bad += [f"all_gather block {q}" for q in range(w)
            if not torch.equal(out[q * STRIDE:q * STRIDE + COLS], _values(q, 0, seed))]
    del out
    # reduce-scatter and all-to-all: the last COLS columns of W segments of STRIDE
    # elements (the pieces ``fused_launch.run`` cuts a larger input into)
    start = STRIDE - COLS
    n = w * STRIDE - start
    x = torch.empty(w * STRIDE, dtype=torch.int8)
    for s in range(w):
        x[s * STRIDE + start:(s + 1) * STRIDE] = _values(me, s, seed)
    mine = torch.full((COLS,), 127, dtype=torch.int8)
    _launch(x[start:], mine, kfc.REDUCE_SCATTER, n=n, seg=COLS, stride=STRIDE)
    want = torch.stack([_values(q, me, seed) for q in range(w)]).sum(0, dtype=torch.int8)
    if not torch.equal(mine, want):
        bad.append("reduce_scatter")
    out = torch.empty(w * STRIDE, dtype=torch.int8)
    for q in range(w):
        out[q * STRIDE + start:(q + 1) * STRIDE] = 127
    _launch(x[start:], out[start:], kfc.ALL_TO_ALL, n=n, seg=COLS, stride=STRIDE)
    bad += [f"all_to_all block {q}" for q in range(w)
            if not torch.equal(out[q * STRIDE + start:(q + 1) * STRIDE], _values(q, me, seed))]
    return bad


def test_fused_collective_offsets_past_int32():
    seed = int(torch.randint(0, 2**20, (1,)))
    assert ditron.launch(_rank_far_blocks, 3, seed) == [[]] * 3
