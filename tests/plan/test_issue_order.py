"""Each rank's issue order in the all-gather templates delivers the shards in the order the
plan announces (``Plan.arrival_order``, which the consumer GEMM's tile order follows), and
splitting numbers the pieces in row order."""

from __future__ import annotations

import pytest

from ditron.plan import deps, ir, templates


@pytest.mark.parametrize("mode", ["push", "pull"])
def test_swizzled_all_gather_issues_in_arrival_order(mode):
    """Swizzled: at every step each rank sends to a different rank and receives from a
    different rank, and rank ``d``'s ``k``-th arrival is its source's ``k``-th transfer.
    The push plan was listed by destination, so every rank pushed to rank 0 first and
    rank ``W - 1``, whose GEMM waits for rank 0's shard first, got every shard last."""
    for W in range(1, 9):
        plan = templates.all_gather([3 + r % 2 for r in range(W)], W, order="swizzled",
                                    mode=mode)
        issued = {r: plan.issued_by(r) for r in range(W)}
        assert sum(len(ts) for ts in issued.values()) == W * (W - 1)
        for step in range(W - 1):
            moves = [(ts[step].src, ts[step].dst) for ts in issued.values()]
            assert sorted(s for s, _ in moves) == list(range(W)), (W, mode, step, moves)
            assert sorted(d for _, d in moves) == list(range(W)), (W, mode, step, moves)
        for d in range(W):
            assert plan.arrival_order(d) == [(d + i) % W for i in range(1, W)]
            for k, src in enumerate(plan.arrival_order(d)):
                (t,) = [t for t in plan.incoming(d) if t.src == src]
                assert issued[t.issuer].index(t) == k, (W, mode, d, src)


@pytest.mark.parametrize("mode", ["push", "pull"])
def test_rank_order_all_gather_issues_in_arrival_order(mode):
    """Rank order: every rank receives ``0, 1, ...``; no source's transfer to ``d`` comes
    later in its issue order than the transfer ``d`` receives next."""
    for W in range(1, 9):
        plan = templates.all_gather(2, W, order="rank", mode=mode)
        for d in range(W):
            arrival = plan.arrival_order(d)
            assert arrival == [s for s in range(W) if s != d]
            at = [plan.issued_by(t.issuer).index(t)
                  for src in arrival for t in plan.incoming(d) if t.src == src]
            assert at == sorted(at), (W, mode, d, at)


def test_all_gather_refuses_an_unknown_mode_at_any_world_size():
    """One rank has no transfers to check the mode on: it was accepted there."""
    for W in (1, 3):
        with pytest.raises(ValueError, match="all_gather mode must be one of .* got 'bogus'"):
            templates.all_gather(3, W, mode="bogus")
        with pytest.raises(ValueError, match="all_gather order must be 'rank' or 'swizzled'"):
            templates.all_gather(3, W, order="bogus")


def test_split_numbers_an_empty_chunk_before_the_chunk_at_its_row():
    """A chunk of zero rows listed after the chunk that starts at its row: split's pieces
    follow the rows, so the waits can be derived from the split plan (the empty piece was
    numbered after the other's, out of row order: refused)."""
    C, T = ir.Chunk, ir.Transfer
    plan = ir.Plan("p", "A", 6, 3, [C(0, 0, 2, 0), C(1, 2, 6, 2), C(2, 2, 2, 1)],
                   [T(0, 0, 0, 2), T(1, 1, 2, 0), T(2, 2, 1, 0), T(3, 2, 1, 2)])
    fine = ir.split(plan, 3)
    assert [(c.start, c.stop, c.owner) for c in fine.chunks] == [
        (0, 2, 0), (2, 2, 1), (2, 5, 2), (5, 6, 2)]
    deps.check_row_order(fine)
    waits = deps.consumer_waits(fine, deps.TileMapping(6, 4), rank=0)
    assert [waits.waits(mb) for mb in range(2)] == [[2], [2, 3]]
    assert [(fine.chunks[t.chunk].owner, t.src, t.dst) for t in fine.transfers] == [
        (0, 0, 2), (2, 2, 0), (2, 2, 0), (1, 1, 0), (1, 1, 2)]
