"""The benchmarks' own logic (``ditron/benchmarks``), below the command line that
``test_cli.py`` runs: what they time, and that their ranks move what they say."""

from __future__ import annotations

import torch

import ditron


def _a2a_received(tokens: int, topk: int) -> list[tuple[int, int, int]]:
    """``(rows sent, rows received, capacity)`` of every ``all_to_all_device`` call of the
    bench's ``a2a`` row, timed once per variant."""
    from ditron.benchmarks import moe

    real, seen = ditron.ops.all_to_all_device, []

    def spy(x, splits, cap, **kw):
        out, out_splits = real(x, splits, cap, **kw)
        seen.append((int(splits.sum()), int(out_splits.sum()), cap))
        return out, out_splits

    def once(fns, rounds, iters, warmup, device, batch=1):
        return {name: [float(fn() is not None)] for name, fn in fns.items()}

    ditron.ops.all_to_all_device, moe.time_in_rounds = spy, once
    try:
        (row,) = moe._a2a_rows(tokens, 128, topk, 1, 1, 0)
    finally:
        ditron.ops.all_to_all_device = real
    assert row["same_result"] is True
    return sorted(set(seen))


def test_moe_a2a_rows_arrive_on_every_rank_when_they_do_not_divide():
    """4 rows over 3 ranks: the last rank was sent 2 rows by each (6 for a capacity of 4: 2
    dropped) and the others 1 (a row of their output undefined, yet compared)."""
    assert ditron.launch(_a2a_received, 3, 4, 1, backend="cpu") == [[(4, 4, 4)]] * 3


def test_moe_even_splits():
    from ditron.benchmarks.moe import even_splits

    for rows in range(0, 14):
        for W in range(1, 5):
            sent = torch.stack([even_splits(rows, W, r) for r in range(W)])
            assert sent.dtype == torch.int64 and (sent.sum(1) == rows).all()
            assert (sent.sum(0) == rows).all(), (rows, W, sent)  # what each rank receives
            assert int(sent.max() - sent.min()) <= (rows % W > 0)
