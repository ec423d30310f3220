"""Chunk plans: templates, split, printing and chunk-to-tile dependency derivation."""

from __future__ import annotations

import dataclasses

import pytest
import torch

import ditron
from ditron.kernels import swizzle
from ditron.plan import deps, ir, templates


def _owners_landing(plan: ir.Plan, rank: int) -> set[int]:
    return {plan.chunks[t.chunk].owner for t in plan.incoming(rank)}


@pytest.mark.parametrize("world_size", [1, 2, 3, 4])
def test_all_gather_orders(world_size):
    for order in ("rank", "swizzled"):
        plan = templates.all_gather(5, world_size, order=order)
        assert plan.rows == 5 * world_size
        for r in range(world_size):
            assert _owners_landing(plan, r) == set(range(world_size)) - {r}
            assert all(t.issuer == r for t in plan.issued_by(r))  # pulls: issued by dst
    swz = templates.all_gather(5, 4, order="swizzled")
    assert swz.arrival_order(1) == [2, 3, 0]
    assert templates.all_gather(5, 4, order="rank").arrival_order(1) == [0, 2, 3]


def test_all_gather_2d_reaches_everyone_and_orders_stages():
    plan = templates.all_gather_2d(3, 4, 2)
    for r in range(4):
        assert _owners_landing(plan, r) == set(range(4)) - {r}
    for t in plan.transfers:
        if t.level == "inter":
            assert t.kind == "collective" and t.src // 2 != t.dst // 2
        else:  # intra-node pulls, after the inter stage brought the shard to the holder
            assert t.src // 2 == t.dst // 2
            if plan.chunks[t.chunk].owner // 2 != t.src // 2:
                (dep,) = t.after
                assert plan.transfers[dep].dst == t.src
                assert plan.transfers[dep].chunk == t.chunk


@pytest.mark.parametrize("world_size, local", [(2, 1), (4, 2), (6, 3), (6, 2), (8, 4)])
def test_all_gather_2d_delivers_every_shard(world_size, local):
    plan = templates.all_gather_2d([1 + r % 3 for r in range(world_size)], world_size, local)
    for r in range(world_size):
        assert _owners_landing(plan, r) == set(range(world_size)) - {r}


def test_plans_and_mappings_refuse_what_they_cannot_describe():
    with pytest.raises(ValueError, match="local_world_size must divide the world size 6"):
        templates.all_gather_2d(4, 6, 4)  # a short last node: its ranks would miss shards
    with pytest.raises(ValueError, match="world_size must be a positive int, got 0"):
        templates.all_gather(4, 0)
    for rows in (4.0, [2, 2.5], [True, 1], [3]):  # [2, 2.5] made a plan of 4.5 rows
        with pytest.raises(ValueError, match="rows_per_rank must give 2 non-negative int"):
            templates.all_gather(rows, 2)
    with pytest.raises(ValueError, match="block_m >= 1"):
        deps.TileMapping(8, 0)
    plan = templates.all_gather(4, 2)
    with pytest.raises(ValueError, match="covers 100 rows, the plan .* 8: they must tile"):
        deps.consumer_waits(plan, deps.TileMapping(100, 4), 0)
    with pytest.raises(ValueError, match="rank 5 is not a rank of the plan's 2"):
        deps.consumer_waits(plan, deps.TileMapping(8, 4), 5)


def test_reduce_scatter_all_reduce_ring():
    rs = templates.reduce_scatter(4, 3)
    assert all(t.reduce and t.mode == "push" and t.chunk == t.dst for t in rs.transfers)
    assert [t.dst for t in rs.issued_by(1)] == [2, 0]  # scatter order: next rank first
    ar = templates.all_reduce(4, 3)
    bcast = [t for t in ar.transfers if not t.reduce]
    assert len(bcast) == 6
    for t in bcast:  # an owner broadcasts its shard only after every partial landed
        assert {ar.transfers[d].src for d in t.after} == {0, 1, 2} - {t.src}
    ring = templates.ring_all_gather(2, 4)
    ir.check(ring)
    for r in range(4):
        assert _owners_landing(ring, r) == set(range(4)) - {r}
        assert all(t.dst == (t.src + 1) % 4 for t in ring.transfers)


def test_split_refines_chunks_and_dependencies():
    ring = templates.ring_all_gather([5, 3, 0], 3)
    fine = ir.split(ring, 2)
    ir.check(fine)
    assert [(c.start, c.stop, c.owner) for c in fine.chunks] == [
        (0, 2, 0), (2, 4, 0), (4, 5, 0), (5, 7, 1), (7, 8, 1), (8, 8, 2)]
    assert [c.id for c in fine.chunks] == list(range(6))
    # a forwarded piece depends on the same piece's earlier hop
    for t in fine.transfers:
        for d in t.after:
            assert fine.transfers[d].chunk == t.chunk
            assert fine.transfers[d].dst == t.src
    assert len(fine.transfers) == sum(
        len(ir._pieces(ring.chunks[t.chunk], 2)) for t in ring.transfers)
    with pytest.raises(ValueError):
        ir.split(ring, 0)


def test_plan_prints_readably():
    text = str(templates.all_gather_2d(2, 4, 2))
    assert text.startswith("plan all_gather_2d: A[8 rows] over 4 ranks (2 per node)")
    assert "chunk 3: rows [6, 8) of rank 3" in text
    assert "collective, inter" in text and "after [" in text


def test_consumer_waits_straddling_tiles():
    # 3 ranks x 5 rows, BLOCK_M = 4: blocks [0,4) [4,8) [8,12) [12,15)
    plan = templates.all_gather(5, 3)
    waits = deps.consumer_waits(plan, deps.TileMapping(15, 4))
    assert [waits.waits(mb) for mb in range(4)] == [[0], [0, 1], [1, 2], [2]]
    assert waits.owner == [0, 1, 2, 2]
    # rank 1 needs no wait for its own chunk: dropped at the ends of the range
    mine = deps.consumer_waits(plan, deps.TileMapping(15, 4), rank=1)
    assert [mine.waits(mb) for mb in range(4)] == [[0], [0], [2], [2]]
    assert mine.lo.dtype == torch.int32 and mine.hi.dtype == torch.int32
    # finer chunks: a block reads several chunks
    fine = ir.split(plan, 2)
    w2 = deps.consumer_waits(fine, deps.TileMapping(15, 4))
    assert [w2.waits(mb) for mb in range(4)] == [[0, 1], [2, 3, 4], [4, 5, 6], [7, 8]]


def test_segmented_mapping_and_producers():
    # reduce-scatter tiling: blocks restart at each rank's segment of 5 rows
    m = deps.TileMapping(15, 4, seg_rows=5)
    assert [m.rows(mb) for mb in range(m.m_blocks)] == [
        (0, 4), (4, 5), (5, 9), (9, 10), (10, 14), (14, 15)]
    plan = templates.reduce_scatter(5, 3)
    prod, count = deps.producer_chunks(plan, m)
    assert [prod.waits(mb) for mb in range(6)] == [[0], [0], [1], [1], [2], [2]]
    assert count.tolist() == [2, 2, 2]
    # uneven all-reduce segments with an empty last rank: its blocks are empty
    m2 = deps.TileMapping(5, 4, seg_rows=2)
    assert [m2.rows(mb) for mb in range(m2.m_blocks)] == [(0, 2), (2, 4), (4, 5)]


def test_swizzle_orders():
    owner = [0, 0, 1, 1, 2]  # row block -> rank
    g = swizzle.gather_order(owner, 2, rank=1, world_size=3, group_m=1).tolist()
    assert [t // 2 for t in g] == [2, 2, 3, 3, 4, 4, 0, 0, 1, 1]
    s = swizzle.scatter_order(owner, 2, rank=1, world_size=3, group_m=1).tolist()
    assert [t // 2 for t in s] == [4, 4, 0, 0, 1, 1, 2, 2, 3, 3]
    assert sorted(s) == list(range(10)) and sorted(g) == list(range(10))
    grouped = swizzle.linear_order(4, 3, group_m=2).tolist()
    assert grouped[:4] == [0, 3, 1, 4]
    # groups never mix segments: every peer tile precedes every own tile, so a program of
    # the GEMM-RS never waits (own tiles) with peer tiles still to do (3 blocks per rank,
    # groups of 4 row blocks)
    owner3 = [0, 0, 0, 1, 1, 1]
    for rank in (0, 1):
        order = swizzle.scatter_order(owner3, 2, rank=rank, world_size=2, group_m=4).tolist()
        segs = [owner3[t // 2] for t in order]
        assert segs == [1 - rank] * 6 + [rank] * 6, segs
        assert sorted(order) == list(range(12))


def test_cost_model_and_tune_cache(tmp_path, monkeypatch):
    from ditron.tune import cache, cost_model

    monkeypatch.setenv("DITRON_CACHE_DIR", str(tmp_path))
    key = cache.make_key("ag_gemm", (8, 4, 2), "bfloat16", 2, "cpu")
    assert cache.get(key) is None
    cache.put(key, {"method": "overlap", "block_m": 16})
    assert cache.get(key) == {"method": "overlap", "block_m": 16}
    assert (tmp_path / cache.FILE).exists()
    # large AG-GEMM with comparable compute and communication: overlap pays on an H200;
    # the small GEMM-RS regression shape of REFERENCES.md (per rank at W=8) does not
    spec = cost_model.H200
    big = cost_model.estimate("ag_gemm", 8192, 14336 // 8, 4096, 8, 2, spec)
    assert big.pays and big.t_overlap < big.t_serial
    assert not cost_model.overlap_pays("gemm_rs", 64, 64, 64, 8, 2, "cuda", "NVIDIA H200")
    assert not cost_model.overlap_pays("ag_gemm", 8192, 8192, 8192, 1, 2, "cuda", "H200")


def test_publish_refuses_chunk_ids_on_another_device():
    """The publish kernel reads the chunk ids: ids on another device than the signals are
    refused by name before any launch (the context is not even looked at)."""
    from ditron.plan import lowering

    signals = torch.zeros(4, dtype=torch.int32)
    with pytest.raises(ValueError, match="chunk_ids are on meta, the signals on cpu"):
        lowering.publish(signals, torch.tensor([1], dtype=torch.int32, device="meta"), 1,
                         range(2), None)
    assert signals.eq(0).all()


def test_gather_order_places_a_straddling_block_after_its_last_arriving_shard():
    """A row block reading the end of shard ``r - 1`` and the start of rank ``r``'s own
    shard waits for ``r - 1``, which the swizzled plan brings to ``r`` last: the block must
    come after every other peer's blocks, not with the own rows (first)."""
    plan = templates.all_gather(5, 3)  # blocks of 4: [0,4) [4,8) [8,12) [12,15)
    mine = deps.consumer_waits(plan, deps.TileMapping(15, 4), rank=1)
    assert plan.arrival_order(1) == [2, 0]
    assert mine.owner == [0, 0, 2, 2]  # [4, 8) reads shards 0 and 1: with 0, which lands last
    order = swizzle.gather_order(mine.owner, 1, 1, 3, arrival=plan.arrival_order(1)).tolist()
    assert order == [2, 3, 0, 1]
    for rank in range(3):  # every block follows each peer shard it reads in arrival order
        w = deps.consumer_waits(plan, deps.TileMapping(15, 4), rank=rank)
        landing = [rank] + plan.arrival_order(rank)
        for mb in range(4):
            owners = {plan.chunks[c].owner for c in w.waits(mb)}
            assert all(landing.index(w.owner[mb]) >= landing.index(q) for q in owners)


def test_tile_orders_visit_every_tile_once_or_refuse():
    owner = [0, 0, 1, 2, -1]  # -1: a block of no rows, left out
    # an arrival order that leaves a rank out still visits its blocks (after the others)
    g = swizzle.gather_order(owner, 2, rank=0, world_size=3, arrival=[2], group_m=1).tolist()
    assert [t // 2 for t in g] == [0, 0, 1, 1, 3, 3, 2, 2]
    with pytest.raises(ValueError, match="arrival must name distinct ranks in \\[0, 3\\)"):
        swizzle.gather_order(owner, 2, rank=0, world_size=3, arrival=[1, 1, 2])
    with pytest.raises(ValueError, match="arrival must name distinct ranks"):
        swizzle.gather_order(owner, 2, rank=0, world_size=3, arrival=[1, 3])
    for fn in (swizzle.gather_order, swizzle.scatter_order):  # block of segment 3 of 3
        with pytest.raises(ValueError, match="segment in \\[0, 3\\) or -1 .* got \\[3\\]"):
            fn([0, 1, 3], 2, rank=0, world_size=3)
    for W in range(1, 5):
        for M in (1, 5, 13, 40):
            for bm in (1, 4, 16, 64):
                m = deps.TileMapping(M, bm)
                plan = templates.all_gather([M // W + (r < M % W) for r in range(W)], W)
                for rank in range(W):
                    w = deps.consumer_waits(plan, m, rank)
                    order = swizzle.gather_order(w.owner, 3, rank, W,
                                                 arrival=plan.arrival_order(rank), group_m=2)
                    assert sorted(order.tolist()) == list(range(3 * m.m_blocks))


def _uneven_push_gather(sizes, engine):
    """A push all-gather plan with an empty shard between two others, lowered to
    ``engine``, consumed by the persistent GEMM with the waits derived from the same plan."""
    from ditron.kernels import gemm
    from ditron.plan import lowering

    cfg = gemm.GemmConfig(block_m=16, block_n=32, block_k=16, group_m=4, num_warps=1,
                          num_stages=1, programs=1)
    w = ditron.world()
    r, W = w.rank, w.world_size
    M, K, N = sum(sizes), 16, 8
    plan = templates.all_gather(sizes, W, mode="push")
    buf = ditron.zeros((M, K), torch.float32)
    pad = ditron.signal_pad("test.plan.uneven", plan.num_chunks)
    g = torch.Generator().manual_seed(0)
    full, b = torch.randn(M, K, generator=g), torch.randn(K, N, generator=g)
    ditron.set_wait_timeout(5)
    for _ in range(2):  # a second call, one epoch later, over the same signals
        epoch = pad.next_epoch()
        buf.zero_()
        mine = plan.chunks[r]
        buf[mine.start:mine.stop] = full[mine.start:mine.stop].to(buf.device)
        ditron.barrier()
        view = lambda c, _q: buf[c.start:c.stop]  # noqa: E731
        engine_ = lowering.issue(engine, lowering.engine_transfers(plan, r, view, view, pad,
                                                                   epoch))
        waits = deps.consumer_waits(plan, deps.TileMapping(M, cfg.block_m), r)
        order = swizzle.gather_order(waits.owner, 1, r, W, arrival=plan.arrival_order(r),
                                     group_m=cfg.group_m).to(buf.device)
        pad.signals[r] = epoch  # the own chunk is in place
        c = torch.full((M, N), float("nan"), device=buf.device)
        hooks = gemm.GemmHooks(waits=gemm.slot_waits(order, waits.lo, waits.hi, 1),
                               wait_sig=pad.signals, wait_target=epoch)
        gemm.launch_gemm(buf, b.to(buf.device), c, M, order=order, seg_rows=M, cfg=cfg,
                         hooks=hooks, ctx=ditron.context())
        engine_.drain()
        ditron.check_waits()
        torch.testing.assert_close(c.cpu(), full @ b, rtol=1e-5, atol=1e-4)
        ditron.barrier()
    return True


@pytest.mark.parametrize("engine", ["copy_engine", "sm"])
def test_lowered_plan_signals_the_empty_chunks_a_tile_waits_across(backend, engine):
    """Rank 1 has no rows: the first row block of rank 3 reads chunks 0 and 2, so its range
    [0, 2] passes over chunk 1. The lowering must still raise chunk 1's signal (an empty
    transfer), or the GEMM waits for it forever (here: a wait timeout naming it)."""
    sizes = [3, 0, 7, 2]
    plan = templates.all_gather(sizes, 4, mode="push")
    assert deps.consumer_waits(plan, deps.TileMapping(12, 16), 3).waits(0) == [0, 1, 2]
    assert ditron.launch(_uneven_push_gather, 4, sizes, engine, backend=backend) == [True] * 4


def test_plans_are_checked_when_built():
    chunks = [ir.Chunk(0, 0, 2, 0), ir.Chunk(1, 2, 4, 1)]
    with pytest.raises(ValueError, match="transfer 0 goes from rank 0 to rank 7, outside"):
        ir.Plan("p", "A", 4, 2, chunks, [ir.Transfer(0, 0, 0, 7)])
    with pytest.raises(ValueError, match="transfers must be numbered 0.. in order"):
        ir.Plan("p", "A", 4, 2, chunks, [ir.Transfer(3, 0, 0, 1)])
    with pytest.raises(ValueError, match="chunk 1: rows \\[2, 9\\) of rank 1 do not fit 4"):
        ir.Plan("p", "A", 4, 2, [chunks[0], ir.Chunk(1, 2, 9, 1)], [])
    with pytest.raises(ValueError, match="chunk 1: .* of rank 2 do not fit"):
        ir.Plan("p", "A", 4, 2, [chunks[0], ir.Chunk(1, 2, 4, 2)], [])
    with pytest.raises(ValueError, match="transfer level must be one of"):
        ir.Transfer(0, 0, 0, 1, level="node")
    # split refuses a dependency it cannot map (was a KeyError / IndexError)
    forward = ir.Plan("p", "A", 4, 2, chunks, [ir.Transfer(0, 0, 0, 1, after=(1,)),
                                               ir.Transfer(1, 1, 1, 0)])
    with pytest.raises(ValueError, match="transfer 0 depends on 1, which is not earlier"):
        ir.split(forward, 1)
    with pytest.raises(ValueError, match="chunk_rows must be a positive int, got 2.5"):
        ir.split(templates.ring_all_gather(4, 3), 2.5)
    with pytest.raises(ValueError, match="local_world_size must divide .* got 2.0"):
        templates.all_gather_2d(4, 4, 2.0)
    with pytest.raises(ValueError, match="TileMapping needs ints .* block_m=4.5"):
        deps.TileMapping(8, 4.5)


def test_publish_refuses_a_strided_range_of_peers():
    from ditron.plan import lowering

    signals = torch.zeros(4, dtype=torch.int32)
    with pytest.raises(ValueError, match="contiguous range of ranks, got range\\(0, 4, 2\\)"):
        lowering.publish(signals, torch.tensor([1], dtype=torch.int32), 1, range(0, 4, 2), None)


def test_waits_refuse_chunks_that_do_not_tile_the_rows_in_order():
    """``consumer_waits`` names the chunks between ``lo`` and ``hi`` by id: chunks out of
    row order made a block of rank 1 wait for its own chunk 1, which it does not read
    (never signalled where own rows are read in place: a hang), and rows in no chunk were
    read with no wait at all; both are refused by name."""
    C = ir.Chunk
    shuffled = ir.Plan("p", "A", 6, 3, [C(0, 0, 2, 0), C(1, 4, 6, 1), C(2, 2, 4, 2)],
                       [ir.Transfer(0, 0, 0, 1), ir.Transfer(1, 2, 2, 1)])
    with pytest.raises(ValueError, match="plan p: chunk 1 starts at row 4, not 2: waits are "
                                         "derived for chunks that tile the rows \\[0, 6\\)"):
        deps.consumer_waits(shuffled, deps.TileMapping(6, 4), rank=1)
    # rows in no chunk: now refused when the plan is built (test_hand_written_plans_...)
    with pytest.raises(ValueError, match="plan g: rows \\[2, 4\\) are in no chunk"):
        ir.Plan("g", "A", 6, 2, [C(0, 0, 2, 0), C(1, 4, 6, 1)], [ir.Transfer(0, 1, 1, 0)])
    with pytest.raises(ValueError, match="plan s: rows \\[4, 6\\) are in no chunk"):
        ir.Plan("s", "A", 6, 2, [C(0, 0, 2, 0), C(1, 2, 4, 1)], [])
    # chunks of zero rows anywhere are fine
    ok = ir.Plan("z", "A", 4, 3, [C(0, 0, 0, 0), C(1, 0, 4, 1), C(2, 4, 4, 2)], [])
    assert deps.consumer_waits(ok, deps.TileMapping(4, 3)).waits(0) == [1]


def _engine_plan_views():
    buf = torch.zeros(16, 2)
    view = lambda c, _q: buf[c.start:c.stop]  # noqa: E731
    return view, object()  # a stand-in pad: only named by the signals


def test_lowering_waits_for_a_forwarded_chunk_or_refuses():
    """``engine_transfers`` dropped every ``after``: a ring's forward moved a chunk before
    it had landed (and raised its signal over stale rows). A forward now waits for the
    chunk's slot on the issuing rank (``Transfer.after``, the copy engine waits); a
    dependency no one slot stands for is refused, as are partials summed at once."""
    from ditron.plan import lowering

    view, pad = _engine_plan_views()
    ring = ir.split(templates.ring_all_gather([3, 0, 2, 1], 4), 2)
    for rank in range(4):
        moves = lowering.engine_transfers(ring, rank, view, view, pad, 9)
        plan_moves = [t for t in ring.issued_by(rank)]
        assert len(moves) == len(plan_moves) > 0
        for t, m in zip(plan_moves, moves, strict=True):
            if ring.chunks[t.chunk].owner == rank:
                assert m.after is None
            else:  # forwarded: after the piece reached this rank
                assert (m.after.pad, m.after.index, m.after.value) == (pad, t.chunk, 9)
            assert (m.signal.index, m.signal.value) == (t.chunk, 9)
    # two-level: the intra stage's dependencies are on the network stage, run before
    two = templates.all_gather_2d(2, 4, 2)
    assert all(m.after is None for r in range(4)
               for m in lowering.engine_transfers(two, r, view, view, pad, 1))
    # a pull from a rank that received the chunk: no slot of the issuing rank says so
    C = ir.Chunk
    relay = ir.Plan("relay", "A", 4, 3, [C(0, 0, 2, 0), C(1, 2, 4, 1)],
                    [ir.Transfer(0, 0, 0, 1, mode="push"),
                     ir.Transfer(1, 0, 1, 2, mode="pull", after=(0,))])
    for rank in range(3):  # on every rank (rank 0 lowered its push; rank 2 then waited)
        with pytest.raises(ValueError, match="transfer 1 of plan relay .* waits for transfers "
                                             "\\[0\\], which no one signal of rank 2"):
            lowering.engine_transfers(relay, rank, view, view, pad, 1)
    # two ranks: one partial per chunk and destination, then the broadcast waits for it
    ar = templates.all_reduce(3, 2)
    moves = lowering.engine_transfers(ar, 0, view, view, pad, 4)
    assert [(m.reduce, m.after is not None) for m in moves] == [(True, False), (False, True)]
    for W in (3, 4):  # partials summed at once, without atomics, lose updates
        for plan in (templates.reduce_scatter(2, W), templates.all_reduce(2, W)):
            with pytest.raises(ValueError, match="sums the partials of ranks .* sum without "
                                                 "atomics"):
                lowering.engine_transfers(plan, 0, view, view, pad, 1)


def _ring(engine: str) -> list[float]:
    from ditron.plan import lowering

    w = ditron.world()
    plan = ir.split(templates.ring_all_gather(3, w.world_size), 2)
    buf = ditron.zeros((plan.rows, 2), torch.float32)
    mine = plan.chunks_of(w.rank)
    buf[mine[0].start:mine[-1].stop] = w.rank + 1
    pad = ditron.signal_pad("test.plan.ring", plan.num_chunks)
    ditron.set_wait_timeout(10)
    out = []
    for _ in range(2):  # the second call one epoch later, over the same signals
        epoch = pad.next_epoch()
        ditron.barrier()
        view = lambda c, _q: buf[c.start:c.stop]  # noqa: E731
        try:
            moves = lowering.engine_transfers(plan, w.rank, view, view, pad, epoch)
            lowering.issue(engine, moves).drain()
        except ValueError as exc:
            return [str(exc)]
        ditron.barrier()
        out.append(buf[:, 0].tolist())
        buf[[i for i in range(plan.rows) if not mine[0].start <= i < mine[-1].stop]] = 0
    return out


def test_a_lowered_ring_forwards_what_has_landed(backend):
    """4 ranks, ring all-gather in pieces of 2 rows by the copy engine: every rank ends
    with every shard (forwards used to copy rows that had not arrived, mostly zeros); an
    engine that cannot wait refuses."""
    want = [float(1 + i // 3) for i in range(12)]
    assert ditron.launch(_ring, 4, "copy_engine", backend=backend) == [[want, want]] * 4
    for got in ditron.launch(_ring, 4, "sm", backend=backend):
        assert got[0].startswith("sm engine: cannot wait for a signal"), got


def test_hand_written_plans_are_refused_when_built():
    """A hand-written plan that could not run is refused by name when built, before any
    lowering: a transfer waiting for itself or in a cycle (lowered, it waited for its own
    signal: a wait timeout), a dependency outside the plan (``-1`` was taken as the last
    transfer, ``5`` an ``IndexError`` in the lowering), chunks that overlap or leave rows
    uncovered (lowered as given), a transfer from a rank to itself (summed, it doubled the
    rows), non-int fields (a chunk of 2.5 rows) and nodes that do not divide the world."""
    C, T = ir.Chunk, ir.Transfer
    two = [C(0, 0, 2, 0), C(1, 2, 4, 1)]

    def plan(transfers, chunks=two, rows=4, **kw):
        return ir.Plan("h", "A", rows, 2, chunks, transfers, **kw)

    with pytest.raises(ValueError, match="transfer 0 depends on itself: it would never start"):
        plan([T(0, 0, 0, 1, after=(0,))])
    with pytest.raises(ValueError, match="plan h: transfers 0 -> 1 -> 0 form a cycle"):
        plan([T(0, 0, 0, 1, after=(1,)), T(1, 1, 1, 0, after=(0,))])
    with pytest.raises(ValueError, match="plan h: transfers 1 -> 2 -> 3 -> 1 form a cycle"):
        plan([T(0, 0, 0, 1), T(1, 1, 1, 0, after=(0, 2)), T(2, 0, 0, 1, after=(3,)),
              T(3, 1, 1, 0, after=(1,))])
    for dep in (-1, 5):
        with pytest.raises(ValueError, match=f"transfer 1 depends on {dep}, which is not a "
                                             f"transfer of the plan \\(0..1\\)"):
            plan([T(0, 0, 0, 1), T(1, 1, 1, 0, after=(dep,))])
    with pytest.raises(ValueError, match="chunks 0 and 1 overlap \\(rows \\[0, 3\\) and "
                                         "\\[2, 4\\)\\)"):
        plan([], [C(0, 0, 3, 0), C(1, 2, 4, 1)])
    with pytest.raises(ValueError, match="rows \\[1, 2\\) are in no chunk"):
        plan([], [C(0, 0, 1, 0), C(1, 2, 4, 1)])
    with pytest.raises(ValueError, match="rows \\[0, 4\\) are in no chunk"):
        plan([], [])
    with pytest.raises(ValueError, match="transfer 0 goes from rank 1 to itself"):
        T(0, 1, 1, 1, mode="push", reduce=True)
    with pytest.raises(ValueError, match="chunk stop must be an int, got 2.5"):
        C(0, 0, 2.5, 0)
    with pytest.raises(ValueError, match="transfer 0: reduce must be a bool, got 'False'"):
        T(0, 1, 1, 0, mode="push", reduce="False")  # was taken as True: summed
    assert T(0, 1, 1, 0, reduce=0).reduce is False
    with pytest.raises(ValueError, match="transfer 1: after must list transfer ids"):
        T(1, 1, 1, 0, after=0)
    with pytest.raises(ValueError, match="plan rows must be an int >= 0, got 4.0"):
        plan([], rows=4.0)
    with pytest.raises(ValueError, match="local_world_size must divide the world size 2"):
        plan([], local_world_size=3)
    # still fine: a chunk of zero rows anywhere, a forward dependency (check() refuses it),
    # after as a list (kept as a tuple of ints)
    ok = plan([T(0, 0, 0, 1, after=[1]), T(1, 1, 1, 0)], [*two, C(2, 2, 2, 0)])
    assert ok.transfers[0].after == (1,)
    with pytest.raises(ValueError, match="transfer 0 depends on 1, which is not earlier"):
        ir.check(ok)


def test_lowering_refuses_a_wait_for_a_later_transfer_of_the_same_rank():
    """Rank 1 forwards chunk 0 (t0) after pulling it (t1), but issues the forward first: its
    copy engine ran t0 first, waiting for the signal t1 raises (a wait timeout on rank 1).
    Refused on every rank before any transfer; in the other order it lowers."""
    from ditron.plan import lowering

    view, pad = _engine_plan_views()
    C, T = ir.Chunk, ir.Transfer
    chunks = [C(0, 0, 2, 0), C(1, 2, 4, 1), C(2, 4, 6, 2)]
    late = ir.Plan("late", "A", 6, 3, chunks, [T(0, 0, 1, 2, mode="push", after=(1,)),
                                               T(1, 0, 0, 1, mode="pull")])
    for rank in range(3):
        with pytest.raises(ValueError, match="transfer 0 of plan late waits for transfers "
                                             "\\[1\\], which rank 1 issues after it"):
            lowering.engine_transfers(late, rank, view, view, pad, 1)
    early = ir.Plan("early", "A", 6, 3, chunks, [T(0, 0, 0, 1, mode="pull"),
                                                 T(1, 0, 1, 2, mode="push", after=(0,))])
    moves = lowering.engine_transfers(early, 1, view, view, pad, 1)
    assert [m.after is not None for m in moves] == [False, True]


def test_plans_are_immutable_once_checked():
    """A plan's fields and its chunk and transfer lists could be changed after the checks
    (a transfer waiting for itself appended, the world size set to 1) and the plan lowered
    as it was then; plans are frozen now, their chunks and transfers tuples."""
    plan = templates.all_gather([2, 0, 3], 3, mode="push")
    assert type(plan.chunks) is tuple and type(plan.transfers) is tuple
    with pytest.raises(AttributeError):
        plan.transfers.append(ir.Transfer(6, 0, 0, 1, after=(6,)))
    with pytest.raises(TypeError):
        plan.chunks[0] = ir.Chunk(0, 0, 9, 0)
    for field, value in (("world_size", 1), ("rows", 9), ("transfers", []), ("chunks", [])):
        with pytest.raises(dataclasses.FrozenInstanceError):
            setattr(plan, field, value)
    assert plan.world_size == 3 and len(plan.transfers) == 6 and plan.rows == 5
    # lists are still taken (kept as tuples); split and the templates build on tuples
    C, T = ir.Chunk, ir.Transfer
    hand = ir.Plan("h", "A", 4, 2, [C(0, 0, 2, 0), C(1, 2, 4, 1)], [T(0, 0, 0, 1)])
    assert hand.chunks == (C(0, 0, 2, 0), C(1, 2, 4, 1)) and hand.transfers == (T(0, 0, 0, 1),)
    assert ir.split(hand, 1).num_chunks == 4 and templates.all_reduce(2, 2).transfers[2].after
    with pytest.raises(ValueError, match="plan chunks must be a sequence of Chunks, got"):
        ir.Plan("h", "A", 4, 2, [(0, 0, 2, 0), (1, 2, 4, 1)], [])
    with pytest.raises(ValueError, match="plan transfers must be a sequence of Transfers"):
        ir.Plan("h", "A", 4, 2, hand.chunks, None)


def test_plans_refuse_copies_of_rows_the_sender_does_not_hold():
    """A transfer copying a chunk from a rank that neither owns it nor waits for a transfer
    bringing it there moved rows that had not landed (lowered, the copy engine copied the
    poison and raised the chunk's signal over it); an intra-node transfer between nodes was
    refused only by the issuing rank's engine. Both are refused when the plan is built."""
    C, T = ir.Chunk, ir.Transfer
    chunks = [C(0, 0, 2, 0), C(1, 2, 4, 1), C(2, 4, 6, 2)]
    with pytest.raises(ValueError, match="plan p: transfer 1 copies chunk 0 from rank 1, which "
                                         "does not hold it \\(rank 0 owns it"):
        ir.Plan("p", "A", 6, 3, chunks, [T(0, 0, 0, 1, mode="push"),
                                          T(1, 0, 1, 2, mode="push")])
    # waiting for the transfer that brought it (directly or through another) is fine
    ir.Plan("p", "A", 6, 3, chunks, [T(0, 0, 0, 1), T(1, 1, 1, 2, after=(0,)),
                                      T(2, 0, 1, 2, after=(1,))])
    # a summing transfer sends its own partial
    ir.Plan("p", "A", 6, 3, chunks, [T(0, 0, 1, 0, mode="push", reduce=True)])
    with pytest.raises(ValueError, match="transfer 0 goes from rank 1 to rank 2, on another "
                                         "node \\(nodes of 2 ranks\\), but is intra-node"):
        ir.Plan("p", "A", 6, 4, [*chunks, C(3, 6, 6, 3)], [T(0, 1, 1, 2)], local_world_size=2)
    ir.Plan("p", "A", 6, 4, [*chunks, C(3, 6, 6, 3)], [T(0, 1, 1, 2, level="inter")],
            local_world_size=2)


def _cycle_plan() -> ir.Plan:
    """Rank 0 pushes chunk 0 to rank 1 (t1), which pushes it back (t2, a relay), and
    forwards it to rank 2 after it came back (t0); but t0 is listed, so issued, before t1:
    rank 0's engine waits for t2, which waits for t1, queued behind t0 on rank 0."""
    C, T = ir.Chunk, ir.Transfer
    return ir.Plan("cyc", "A", 6, 3, [C(0, 0, 2, 0), C(1, 2, 4, 1), C(2, 4, 6, 2)],
                   [T(0, 0, 0, 2, mode="push", after=(2,)), T(1, 0, 0, 1, mode="push"),
                    T(2, 0, 1, 0, mode="push", after=(1,))])


def test_lowering_refuses_on_every_rank_what_would_hang_or_race():
    """What the engines cannot run was refused by the rank issuing it only, or not at all:
    a dependency no one signal stands for (the other ranks lowered and waited), transfers
    waiting for each other through several ranks' issue orders (every engine waited
    forever), and a chunk landing twice on one rank from two senders (its signal raised by
    the first, the rows read while the second wrote). Now every rank raises the same
    ``ValueError``; a rank outside the plan is refused too (it lowered nothing)."""
    from ditron.plan import lowering

    view, pad = _engine_plan_views()
    C, T = ir.Chunk, ir.Transfer
    chunks = [C(0, 0, 2, 0), C(1, 2, 4, 1), C(2, 4, 6, 2)]
    dup = ir.Plan("dup", "A", 6, 3, chunks, [T(0, 0, 0, 1, mode="push"),
                                             T(1, 0, 0, 2, mode="push"),
                                             T(2, 0, 1, 2, mode="push", after=(0,))])
    for plan, match in ((_cycle_plan(), "transfers 0 -> 2 -> 1 -> 0 of plan cyc each wait for "
                                        "the next"),
                        (dup, "plan dup lands chunk 0 on rank 2 2 times \\(transfers "
                              "\\[1, 2\\]\\)")):
        for rank in range(3):
            with pytest.raises(ValueError, match=match):
                lowering.engine_transfers(plan, rank, view, view, pad, 1)
    # listed in an order each engine can follow, the same relay lowers
    ok = ir.Plan("ok", "A", 6, 3, chunks, [T(0, 0, 0, 1, mode="push"),
                                           T(1, 0, 1, 0, mode="push", after=(0,)),
                                           T(2, 0, 0, 2, mode="push", after=(1,))])
    assert [len(lowering.engine_transfers(ok, r, view, view, pad, 1)) for r in range(3)] == [
        2, 1, 0]
    with pytest.raises(ValueError, match="engine_transfers: rank of plan ok must be an int in "
                                         "\\[0, 3\\), got 3"):
        lowering.engine_transfers(ok, 3, view, view, pad, 1)


def _lower_cycle() -> str:
    w = ditron.world()
    plan = _cycle_plan()
    buf = ditron.zeros((plan.rows, 2), torch.float32)
    pad = ditron.signal_pad("test.plan.cycle", plan.num_chunks)
    ditron.set_wait_timeout(3)
    view = lambda c, _q: buf[c.start:c.stop]  # noqa: E731
    epoch = pad.next_epoch()
    ditron.barrier()
    try:
        from ditron.plan import lowering

        lowering.issue("copy_engine", lowering.engine_transfers(plan, w.rank, view, view, pad,
                                                                epoch)).drain()
    except Exception as exc:  # noqa: BLE001 - the test compares what each rank raised
        return f"{type(exc).__name__}: {exc}"
    return "lowered"


def test_a_plan_whose_engines_would_wait_for_each_other_is_refused_by_every_rank(backend):
    """3 ranks, the copy engine: ranks 0 and 1 used to wait for each other's signal until
    the wait timeout (rank 2 returned); now each raises before any transfer."""
    got = ditron.launch(_lower_cycle, 3, backend=backend)
    want = "ValueError: engine_transfers: transfers 0 -> 2 -> 1 -> 0 of plan cyc each wait for"
    assert len(got) == 3 and all(g.startswith(want) for g in got), got
