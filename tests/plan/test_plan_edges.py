"""Edges of chunk plans a user writing an overlapped op meets: every template, run transfer
by transfer in any order its dependencies allow, leaves exactly the collective's result on
every rank (world sizes 1-8, uneven and empty shards, nodes of every size dividing the
world, splits finer and coarser than the shards); arguments that cannot describe a plan
(ranks that are not int ranks, sizes given as a mapping or a set, mappings that are not
``TileMapping`` s, peers that are not a range) are refused with a ``ValueError``; and a
printed transfer names its ranks and whether it sums."""

from __future__ import annotations

import random

import numpy as np
import pytest
import torch

from ditron.plan import deps, ir, lowering, templates

NAMES = ("all_gather_rank", "all_gather_swizzled", "all_gather_2d", "reduce_scatter",
         "all_reduce", "ring_all_gather")


def _plan(name: str, sizes, W: int, rng: random.Random) -> ir.Plan:
    mode = rng.choice(["push", "pull"])
    if name == "all_gather_rank":
        return templates.all_gather(sizes, W, order="rank", mode=mode)
    if name == "all_gather_swizzled":
        return templates.all_gather(sizes, W, mode=mode)
    if name == "all_gather_2d":
        nodes = [L for L in range(1, W + 1) if W % L == 0] if type(W) is int else [1]
        return templates.all_gather_2d(sizes, W, rng.choice(nodes or [1]))
    return getattr(templates, name)(sizes, W)


def _run(plan: ir.Plan, data: list[torch.Tensor], summed: bool,
         rng: random.Random) -> list[torch.Tensor]:
    """Each rank's buffer after running the plan's transfers one at a time, each picked at
    random among those whose ``after`` transfers have all run (reading its source rows when
    it runs): a gather starts with NaN but in the owner's chunks, a sum with the partials."""
    W = plan.world_size
    buf = [d.clone() for d in data] if summed else [torch.full_like(d, float("nan"))
                                                    for d in data]
    if not summed:
        for c in plan.chunks:
            buf[c.owner][c.start:c.stop] = data[c.owner][c.start:c.stop]
    done: set[int] = set()
    todo = list(plan.transfers)
    while todo:
        ready = [t for t in todo if set(t.after) <= done]
        assert ready, (plan, "transfers wait for each other")
        t = rng.choice(ready)
        todo.remove(t)
        c = plan.chunks[t.chunk]
        rows = buf[t.src][c.start:c.stop].clone()
        if t.reduce:
            buf[t.dst][c.start:c.stop] += rows
        else:
            buf[t.dst][c.start:c.stop] = rows
        done.add(t.id)
    assert len(buf) == W
    return buf


def test_templates_deliver_exactly_the_collective_in_any_allowed_order():
    """The union of a template's transfers, run in a random order its dependencies allow,
    is the collective: a gather leaves every rank every shard (no NaN left: every row
    covered; each copied from its owner's data), a reduce-scatter each rank the sum of
    its own rows (the other rows untouched), an all-reduce every rank the sum of all."""
    rng = random.Random(74)
    for trial in range(400):
        W = rng.randint(1, 8)
        sizes = rng.choice([rng.randint(0, 6), [rng.choice([0, 0, 1, 2, 3, 5]) for _ in
                                                range(W)]])
        name = NAMES[trial % len(NAMES)]
        plan = _plan(name, sizes, W, rng)
        if rng.random() < 0.5:  # finer or coarser than the shards
            plan = ir.split(plan, rng.randint(1, 8))
        summed = name in ("reduce_scatter", "all_reduce")
        data = [torch.randn(plan.rows, 2) for _ in range(W)]
        got = _run(plan, data, summed, rng)
        total = sum(data)
        for r in range(W):
            if name == "all_reduce":
                want = total
            elif name == "reduce_scatter":
                want = data[r].clone()
                for c in plan.chunks_of(r):
                    want[c.start:c.stop] = total[c.start:c.stop]
            else:
                want = torch.empty(plan.rows, 2)
                for c in plan.chunks:
                    want[c.start:c.stop] = data[c.owner][c.start:c.stop]
            where = f"{plan.name} over {W} ranks ({sizes}), rank {r}"
            torch.testing.assert_close(got[r], want, msg=lambda m, where=where: f"{where}: {m}")


@pytest.mark.parametrize("rank", [True, 1.5, "0", -1, 3, 1.0])
def test_consumer_waits_refuses_a_rank_that_is_not_an_int_rank(rank):
    """1.5 used to drop no own chunk and ``True`` rank 1's, silently; "0" raised TypeError."""
    plan = templates.all_gather(3, 3)
    with pytest.raises(ValueError, match="is not a rank of the plan's 3"):
        deps.consumer_waits(plan, deps.TileMapping(9, 2), rank)


def test_consumer_waits_takes_a_numpy_rank_as_the_int():
    plan = ir.split(templates.all_gather([3, 0, 4], 3), 2)
    m = deps.TileMapping(7, 3)
    a, b = deps.consumer_waits(plan, m, np.int64(2)), deps.consumer_waits(plan, m, 2)
    assert torch.equal(a.lo, b.lo) and torch.equal(a.hi, b.hi) and a.owner == b.owner


def test_consumer_waits_refuses_arguments_of_other_types():
    plan = templates.all_gather(3, 2)
    for args in ((plan, (6, 2)), (plan, 2), ("plan", deps.TileMapping(6, 2))):
        with pytest.raises(ValueError, match="takes a Plan and a TileMapping"):
            deps.consumer_waits(*args)


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("sizes", [{0: 3, 1: 5}, {3, 5}, b"\x03\x05", "35"])
def test_templates_refuse_sizes_given_as_a_mapping_or_a_set(name, sizes):
    """A dict of rank -> rows gave its keys as the sizes (rows 0 and 1, not 3 and 5), and a
    set's sizes came in no defined order: both built a plan of other rows, silently."""
    with pytest.raises(ValueError, match="rows_per_rank must give 2 non-negative int sizes"):
        _plan(name, sizes, 2, random.Random(0))


@pytest.mark.parametrize("name", NAMES)
def test_templates_refuse_bad_sizes_and_world_sizes(name):
    rng = random.Random(1)
    for sizes, W in ((-1, 2), (1.0, 2), (True, 2), ([1, -1], 2), ([1, 2], 3), (None, 2),
                     (torch.tensor([1, 2]), 2), (1, 0), (1, -2), (1, 2.0), (1, True)):
        with pytest.raises(ValueError, match="rows_per_rank|world_size|local_world_size"):
            _plan(name, sizes, W, rng)
    for sizes in (np.array([1, 0, 2]), (1, 0, 2), iter([1, 0, 2])):
        assert _plan(name, sizes, 3, rng).rows == 3


def test_templates_refuse_unknown_options():
    with pytest.raises(ValueError, match="order must be 'rank' or 'swizzled'"):
        templates.all_gather(2, 2, order="ring")
    with pytest.raises(ValueError, match="mode must be one of"):
        templates.all_gather(2, 2, mode="put")
    for L in (0, 3, 5, 2.0, True):
        with pytest.raises(ValueError, match="local_world_size must divide the world size 4"):
            templates.all_gather_2d(1, 4, L)
    for rows in (0, -1, 2.0, True, "2", None):
        with pytest.raises(ValueError, match="chunk_rows must be a positive int"):
            ir.split(templates.all_gather(3, 2), rows)


def test_split_finer_than_nothing_and_coarser_than_everything():
    plan = templates.all_gather([0, 3, 0], 3)
    assert [(c.start, c.stop, c.owner) for c in ir.split(plan, 100).chunks] == [
        (0, 0, 0), (0, 3, 1), (3, 3, 2)]
    empty = templates.all_gather(0, 4)
    fine = ir.split(empty, 1)
    assert fine.rows == 0 and fine.num_chunks == 4 and len(fine.transfers) == 12
    waits = deps.consumer_waits(fine, deps.TileMapping(0, 4), 1)
    assert waits.lo.numel() == 0 and waits.owner == []


def test_transfers_print_their_ranks_and_whether_they_sum():
    """``t0: chunk 2 0 += 1`` read as rank 0 summing rank 1's rows, the other way round, and
    ``chunk 2 2 -> 0`` ran the chunk id into the source rank."""
    text = str(templates.all_reduce([3, 1], 2))
    assert "  t0: chunk 1, rank 0 -> rank 1 summed (push by 0, p2p, intra)" in text
    assert "  t2: chunk 0, rank 0 -> rank 1 copied (push by 0, p2p, intra) after [t1]" in text
    text = str(templates.all_gather_2d([2, 0, 1, 3], 4, 2))
    assert "  t0: chunk 2, rank 2 -> rank 0 copied (pull by 0, collective, inter)" in text
    assert "  t5: chunk 3, rank 1 -> rank 0 copied (pull by 0, p2p, intra) after [t1]" in text


@pytest.mark.parametrize("peers", [[0, 1], (0, 1), 2])
def test_publish_refuses_peers_that_are_not_a_range(peers):
    signals = torch.zeros(4, dtype=torch.int32)
    with pytest.raises(ValueError, match="peers must be a contiguous range of ranks"):
        lowering.publish(signals, torch.tensor([1], dtype=torch.int32), 1, peers, None)
