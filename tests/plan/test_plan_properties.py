"""Property tests of chunk plans (seeded random, no extra dependency): for random plans of
every template, world sizes 1-8, uneven and empty shards, random splits and tile mappings
(tiles that do not divide M and straddle several chunks), the derived waits and producer
counts equal a brute-force reference, every chunk lands once where it should and only
after it is held, splitting keeps the coverage, and every plan prints; lowered to each
engine, a plan moves exactly its chunks' rows and raises exactly their signals."""

from __future__ import annotations

import collections
import dataclasses
import random

import pytest
import torch

import ditron
from ditron.plan import deps, ir, lowering, templates

SEEDS = 120
TEMPLATES = ("all_gather_rank", "all_gather_swizzled", "all_gather_2d", "reduce_scatter",
             "all_reduce", "ring_all_gather")


def _sizes(rng: random.Random, world_size: int) -> int | list[int]:
    if rng.random() < 0.3:
        return rng.randint(0, 9)
    return [rng.choice([0, 0, 1, 2, 3, 5, 7, 13]) for _ in range(world_size)]


def _template(name: str, rng: random.Random, world_size: int | None = None,
              one_node: bool = False) -> ir.Plan:
    W = world_size or rng.randint(1, 8)
    sizes = _sizes(rng, W)
    mode = rng.choice(["push", "pull"])
    if name == "all_gather_rank":
        return templates.all_gather(sizes, W, order="rank", mode=mode)
    if name == "all_gather_swizzled":
        return templates.all_gather(sizes, W, order="swizzled", mode=mode)
    if name == "all_gather_2d":  # simulated nodes of L ranks
        return templates.all_gather_2d(sizes, W, W if one_node else rng.choice(
            [L for L in range(1, W + 1) if W % L == 0]))
    if name == "reduce_scatter":
        return templates.reduce_scatter(sizes, W)
    if name == "all_reduce":
        return templates.all_reduce(sizes, W)
    return templates.ring_all_gather(sizes, W)


def _plans():
    """``(seed, template, plan)``: every template, half of them split at random."""
    for seed in range(SEEDS):
        rng = random.Random(seed)
        for name in TEMPLATES:
            plan = _template(name, rng)
            if rng.random() < 0.5:
                plan = ir.split(plan, rng.randint(1, 6))
            yield seed, name, plan


def _mapping(rng: random.Random, rows: int) -> deps.TileMapping:
    seg = rng.choice([0, 0, rng.randint(1, rows + 2)])
    return deps.TileMapping(rows, rng.randint(1, rows + 3), seg)


def _read(plan: ir.Plan, start: int, stop: int) -> list[ir.Chunk]:
    """Brute force: the chunks with rows in ``[start, stop)``, in row order."""
    return sorted((c for c in plan.chunks if c.rows and c.start < stop and start < c.stop),
                  key=lambda c: c.start)


def _ref_waits(plan: ir.Plan, rows: tuple[int, int], rank: int | None) -> set[int]:
    return {c.id for c in _read(plan, *rows) if rank is None or c.owner != rank}


def _ref_owner(plan: ir.Plan, rows: tuple[int, int], rank: int | None) -> int:
    read = _read(plan, *rows)
    if not read:
        return -1
    if rank is None:
        return read[-1].owner
    landing = [rank, *plan.arrival_order(rank)]

    def when(q: int) -> int:
        return landing.index(q) if q in landing else len(landing)

    last = max(when(c.owner) for c in read)
    return [c.owner for c in read if when(c.owner) == last][-1]


def test_mappings_tile_the_rows_once():
    """Row blocks (plain or restarting per segment, M not a multiple of the tile) cover
    ``[0, M)`` exactly once and never cross a segment boundary."""
    rng = random.Random(0)
    for _ in range(400):
        M = rng.randint(0, 60)
        m = _mapping(rng, M)
        seen = [0] * M
        for mb in range(m.m_blocks):
            start, stop = m.rows(mb)
            assert 0 <= start <= stop and stop <= max(M, start)
            if stop > start:
                assert start // m.segment == (stop - 1) // m.segment, (m, mb)
                assert stop - start <= m.block_m
            for row in range(start, stop):
                seen[row] += 1
        assert seen == [1] * M, m


def test_consumer_waits_equal_the_brute_force_reference():
    """Per row block: every chunk whose rows it reads is waited for (none missing); the
    range holds nothing else but what lies between two needed chunks and needs no data
    (an own chunk, or one of zero rows, which the lowering still signals); and the
    block's owner is the owner of the chunks it reads that land last."""
    rng = random.Random(1)
    checked = 0
    for seed, name, plan in _plans():
        m = _mapping(rng, plan.rows)
        for rank in [None, *range(plan.world_size)]:
            got = deps.consumer_waits(plan, m, rank)
            assert got.lo.dtype == got.hi.dtype == torch.int32
            assert len(got.owner) == got.lo.numel() == m.m_blocks
            for mb in range(m.m_blocks):
                rows = m.rows(mb)
                need, waits = _ref_waits(plan, rows, rank), set(got.waits(mb))
                where = (seed, name, plan.name, m, rank, mb, rows)
                assert need <= waits, ("missing waits", need - waits, *where)
                for c in waits - need:  # only what the [lo, hi] range must pass over
                    chunk = plan.chunks[c]
                    assert min(need) < c < max(need), ("unneeded wait", c, *where)
                    assert chunk.rows == 0 or chunk.owner == rank, ("unneeded wait", c, *where)
                assert got.owner[mb] == _ref_owner(plan, rows, rank), where
                checked += 1
    assert checked > 10_000


def test_producer_counts_equal_the_brute_force_reference():
    """``producer_chunks``: each chunk's count is the number of row blocks whose range
    holds it, and the blocks writing a chunk of rows cover exactly those rows."""
    rng = random.Random(2)
    for seed, name, plan in _plans():
        m = _mapping(rng, plan.rows)
        prod, count = deps.producer_chunks(plan, m)
        ranges = [set(prod.waits(mb)) for mb in range(m.m_blocks)]
        assert count.tolist() == [sum(c in r for r in ranges) for c in range(plan.num_chunks)]
        for c in plan.chunks:
            covered = sorted(row for mb in range(m.m_blocks) if c.id in ranges[mb]
                             for row in range(*m.rows(mb)) if c.start <= row < c.stop)
            assert covered == list(range(c.start, c.stop)), (seed, name, c, m)


def _held_before(plan: ir.Plan, t: ir.Transfer) -> bool:
    """Whether ``t``'s chunk is on ``t.src`` before ``t`` starts: ``src`` owns it, or a
    transfer ``t`` waits for (transitively) brought that chunk to ``src``."""
    if plan.chunks[t.chunk].owner == t.src or t.reduce:  # every rank has a partial
        return True
    todo, seen = list(t.after), set()
    while todo:
        d = todo.pop()
        if d in seen:
            continue
        seen.add(d)
        dep = plan.transfers[d]
        if dep.chunk == t.chunk and dep.dst == t.src:
            return True
        todo += dep.after
    return False


def test_every_chunk_lands_once_where_it_should():
    """Gathers: each chunk lands once on every rank but its owner. Reduce-scatter: each
    other rank's partial of a chunk lands once on its owner, summed. All-reduce: the same,
    then the sum once on every other rank, after every partial. A forwarded chunk (ring,
    two-level) moves only after it reached the rank that forwards it."""
    for seed, name, plan in _plans():
        ir.check(plan)
        W = plan.world_size
        landed = collections.Counter((t.chunk, t.dst, t.reduce) for t in plan.transfers)
        for c in plan.chunks:
            for d in range(W):
                other = int(d != c.owner)
                summed = (W - 1) * (1 - other) if name in ("reduce_scatter", "all_reduce") else 0
                copied = 0 if name == "reduce_scatter" else other
                assert landed[(c.id, d, True)] == summed, (seed, name, c, d)
                assert landed[(c.id, d, False)] == copied, (seed, name, c, d)
        for t in plan.transfers:
            assert t.src != t.dst, (seed, name, t)
            assert _held_before(plan, t), (seed, name, t)
            if name == "all_reduce" and not t.reduce:
                partials = {u.id for u in plan.transfers if u.reduce and u.chunk == t.chunk}
                assert partials <= set(t.after), (seed, name, t)
            if name == "all_gather_2d":
                L = plan.local_world_size
                assert (t.level == "inter") == (t.src // L != t.dst // L), (seed, t)


def test_split_keeps_coverage_and_order():
    """Splitting: the pieces of each chunk tile its rows in row order (ids follow rows);
    each transfer becomes one transfer of each piece with the same endpoints and kind;
    splitting again keeps all of that; the waits of a block cover the same rows of it."""
    rng = random.Random(3)
    for seed in range(SEEDS):
        for name in TEMPLATES:
            plan = _template(name, rng)
            rows = rng.randint(1, 6)
            fine = ir.split(plan, rows)
            assert fine.rows == plan.rows and fine.world_size == plan.world_size
            assert fine.local_world_size == plan.local_world_size
            starts = [(c.start, c.stop) for c in fine.chunks]
            assert starts == sorted(starts) and [c.id for c in fine.chunks] == list(
                range(fine.num_chunks))
            for c in plan.chunks:
                pieces = [p for p in fine.chunks if c.start <= p.start and p.stop <= c.stop
                          and p.owner == c.owner and (p.rows or c.rows == 0)]
                if c.rows == 0:
                    assert len(pieces) >= 1
                    continue
                assert pieces[0].start == c.start and pieces[-1].stop == c.stop
                assert all(a.stop == b.start for a, b in zip(pieces, pieces[1:], strict=False))
                assert all(0 < p.rows <= rows for p in pieces)
            coarse = collections.Counter((t.src, t.dst, t.mode, t.kind, t.level, t.reduce,
                                          plan.chunks[t.chunk].owner, row)
                                         for t in plan.transfers
                                         for row in range(plan.chunks[t.chunk].start,
                                                          plan.chunks[t.chunk].stop))
            refined = collections.Counter((t.src, t.dst, t.mode, t.kind, t.level, t.reduce,
                                           fine.chunks[t.chunk].owner, row)
                                          for t in fine.transfers
                                          for row in range(fine.chunks[t.chunk].start,
                                                           fine.chunks[t.chunk].stop))
            assert coarse == refined, (seed, name, rows)
            again = ir.split(fine, max(1, rows // 2))
            assert [(c.start, c.stop) for c in again.chunks if c.rows] == sorted(
                (c.start, c.stop) for c in again.chunks if c.rows)
            m = _mapping(rng, plan.rows)
            for rank in [None, *range(plan.world_size)]:
                a, b = deps.consumer_waits(plan, m, rank), deps.consumer_waits(fine, m, rank)
                for mb in range(m.m_blocks):
                    block = set(range(*m.rows(mb)))
                    rows_of = [{r for c in w.waits(mb) for r in range(p.chunks[c].start,
                                                                       p.chunks[c].stop)
                                if rank is None or p.chunks[c].owner != rank} & block
                               for w, p in ((a, plan), (b, fine))]
                    assert rows_of[0] == rows_of[1], (seed, name, rows, m, rank, mb)


def test_every_plan_prints():
    for _seed, _name, plan in _plans():
        text = str(plan)
        lines = text.splitlines()
        assert lines[0].startswith(f"plan {plan.name}: {plan.tensor}[{plan.rows} rows] over "
                                   f"{plan.world_size} ranks")
        assert len(lines) == 1 + plan.num_chunks + len(plan.transfers)
        assert all(f"chunk {c.id}: rows [{c.start}, {c.stop}) of rank {c.owner}" in text
                   for c in plan.chunks)


POISON = -7.0
LOWERED = ("all_gather_rank", "all_gather_swizzled", "all_gather_2d", "reduce_scatter",
           "all_reduce", "ring_all_gather")


def _lowered(seed: int) -> list:
    """Random plans lowered to every engine on this rank: returns what went wrong (the
    plan, the engine, the chunks' rows and the pad's signals)."""
    w = ditron.world()
    r, W = w.rank, w.world_size
    rng = random.Random(seed)
    wrong = []
    for trial, name in enumerate(LOWERED):
        plan = _template(name, rng, W, one_node=True)  # every transfer the engines'
        if rng.random() < 0.5:
            plan = ir.split(plan, rng.randint(1, 3))
        summed = name in ("reduce_scatter", "all_reduce")
        M, K = max(plan.rows, 1), 3
        for engine in ("copy_engine", "sm", "tma"):
            if (summed and engine == "tma") or (
                    name in ("ring_all_gather", "all_reduce") and engine != "copy_engine"):
                continue  # tma does not sum; only the copy engine waits (after=)
            buf = ditron.zeros((M, K), torch.float32)
            pad = ditron.signal_pad(f"test.plan.lowered.{trial}.{engine}", plan.num_chunks)
            epoch = pad.next_epoch()
            view = lambda c, _q, buf=buf: buf[c.start:c.stop]  # noqa: E731
            if summed and W > 2:  # partials would be summed at once, without atomics
                with pytest.raises(ValueError, match="sum without atomics"):
                    lowering.engine_transfers(plan, r, view, view, pad, epoch)
                continue

            def data(q: int, M: int = M, K: int = K) -> torch.Tensor:
                return torch.arange(M * K, dtype=torch.float32).view(M, K) + 1000 * (q + 1)

            if summed:
                buf.copy_(data(r))
            else:
                buf.fill_(POISON)
                for c in plan.chunks_of(r):
                    buf[c.start:c.stop] = data(r)[c.start:c.stop]
            ditron.barrier()
            lowering.issue(engine, lowering.engine_transfers(plan, r, view, view, pad,
                                                             epoch)).drain()
            ditron.barrier()
            total = sum(data(q) for q in range(W))
            if name == "all_reduce":
                want = total
            elif name == "reduce_scatter":
                want = data(r)
                for c in plan.chunks_of(r):
                    want[c.start:c.stop] = total[c.start:c.stop]
            else:
                want = torch.full((M, K), POISON)
                for c in plan.chunks:
                    if c.owner == r or any(t.chunk == c.id for t in plan.incoming(r)):
                        want[c.start:c.stop] = data(c.owner)[c.start:c.stop]
            landed = {t.chunk for t in plan.incoming(r)}
            signals = [int(s) for s in pad.signals[:plan.num_chunks]]
            if not torch.equal(buf.cpu(), want) or signals != [
                    epoch if c in landed else 0 for c in range(plan.num_chunks)]:
                wrong.append((plan.name, engine, [c.rows for c in plan.chunks], signals))
            ditron.barrier()
    return wrong


@pytest.mark.parametrize("world_size, seed", [(1, 0), (2, 3), (3, 1), (4, 2)])
def test_lowered_plans_move_exactly_their_regions(backend, world_size, seed):
    """Each engine moves exactly the plan's chunk rows into each rank (the others keep
    their poison), sums partials (two ranks: one partial per chunk; more are refused), and
    raises exactly the slots of the chunks landing there, empty ones included; a ring's
    forwards and an all-reduce's broadcasts wait for their chunk (copy engine)."""
    assert ditron.launch(_lowered, world_size, seed, backend=backend) == [[]] * world_size


def test_waits_equal_a_reference_tiled_independently_up_to_16_ranks():
    """World sizes 1-4, 8 and 16 (host computations only): the rows of each row block are
    recomputed here from ``M``, ``block_m`` and ``seg_rows`` (not from ``TileMapping.rows``),
    with tiles smaller and larger than the chunks, M not a multiple of the tile, zero
    rows and splits finer than the shards; every chunk with a row the block reads (the own
    rank's left out) is waited for, and nothing else but what lies between two of them."""
    rng = random.Random(16)
    for W in (1, 2, 3, 4, 8, 16):
        for _ in range(6):
            sizes = [rng.choice([0, 1, 3, 5, 13, 40]) for _ in range(W)]
            plan = rng.choice([templates.all_gather, templates.ring_all_gather,
                               templates.reduce_scatter])(sizes, W)
            if rng.random() < 0.5:
                plan = ir.split(plan, rng.randint(1, 9))
            M = plan.rows
            for block_m, seg in ((1, 0), (4, 0), (64, 0), (rng.randint(2, 9), rng.randint(1, 20))):
                seg_len = seg or max(M, 1)
                blocks = [range(s0 + j * block_m, min(s0 + (j + 1) * block_m, s0 + seg_len, M))
                          for s0 in range(0, M, seg_len) for j in range(-(-seg_len // block_m))]
                m = deps.TileMapping(M, block_m, seg)
                assert m.m_blocks == len(blocks)
                for rank in (None, rng.randrange(W)):
                    got = deps.consumer_waits(plan, m, rank)
                    for mb, rows in enumerate(blocks):
                        need = {c.id for c in plan.chunks if rank != c.owner and rows and c.rows
                                and c.start <= rows[-1] and rows[0] < c.stop}
                        waits = set(got.waits(mb))
                        where = (plan.name, sizes, block_m, seg, rank, mb)
                        assert need <= waits, where
                        for c in waits - need:
                            assert min(need) < c < max(need), where
                            assert plan.chunks[c].rows == 0 or plan.chunks[c].owner == rank, where


def _hand_written(rng: random.Random) -> tuple:
    """Arguments of a random hand-written ``ir.Plan``: 1-5 ranks in nodes of random size,
    chunks of random rows (zero included) and owners; transfers either relays (each chunk
    pushed along a random path of ranks, each hop after the last) or at random: mostly from
    a rank holding their chunk (after the one that brought it there), some summing, some
    between nodes, now and then a dependency at random (forward, on itself, cycles), a copy
    from a rank that never held the chunk, or one landing where it already is; half of the
    plans listed in a random order (each rank's issue order with it)."""
    W = rng.randint(1, 5)
    L = rng.choice([d for d in range(1, W + 1) if W % d == 0])
    n = rng.randint(1, 2 * W)
    cuts = sorted(rng.randint(0, 12) for _ in range(n - 1))
    bounds = [0, *cuts, rng.randint(cuts[-1] if cuts else 0, 14)]
    chunks = [ir.Chunk(i, bounds[i], bounds[i + 1], rng.randrange(W)) for i in range(n)]
    held = {c.id: {c.owner: None} for c in chunks}  # chunk -> rank -> transfer that brought it
    transfers: list[ir.Transfer] = []
    if rng.random() < 0.3:  # relays: each chunk pushed along a path of ranks (a ring's forwards)
        for c in chunks:
            path = [c.owner, *rng.sample([r for r in range(W) if r != c.owner],
                                         rng.randint(0, W - 1))]
            for hop, (src, dst) in enumerate(zip(path, path[1:], strict=False)):
                after = (len(transfers) - 1,) if hop else ()
                transfers.append(ir.Transfer(len(transfers), c.id, src, dst, mode="push",
                                             after=after, level="intra" if src // L == dst // L
                                             else "inter"))
    for i in range(0 if transfers or W == 1 else rng.randint(0, 4 * W)):  # or at random
        c = rng.randrange(n)
        reduce = rng.random() < 0.15
        src = rng.choice(sorted(held[c])) if rng.random() < 0.95 else rng.randrange(W)
        fresh = [r for r in range(W) if r not in held[c] and r != src]  # mostly one without it
        dst = rng.choice(fresh if fresh and rng.random() < 0.95 else
                         [r for r in range(W) if r != src])
        level = "intra" if src // L == dst // L else "inter"
        if rng.random() < 0.02:
            level = "inter" if level == "intra" else "intra"
        after = [held[c][src]] if held[c].get(src) is not None and rng.random() < 0.98 else []
        if rng.random() < 0.05:
            after.append(rng.randrange(i + 2))  # earlier, itself or a later one
        transfers.append(ir.Transfer(i, c, src, dst, mode=rng.choice(["push"] * 4 + ["pull"]),
                                     reduce=reduce, after=tuple(after), level=level))
        held[c][dst] = i
    if rng.random() < 0.5:  # listed in another order: each rank's issue order changes
        order = rng.sample(range(len(transfers)), len(transfers))
        new_id = {old: new for new, old in enumerate(order)}
        transfers = [dataclasses.replace(transfers[old], id=new, after=tuple(
            new_id.get(d, d) for d in transfers[old].after)) for new, old in enumerate(order)]
    return ("hand", "A", bounds[-1], W, chunks, transfers, L)


def _waited_for(transfers, edges) -> list[set[int]]:
    """Brute force (a fixpoint, not a search): every transfer each one waits for, through
    ``edges(t)`` taken again and again."""
    reach = [set(edges(t)) for t in transfers]
    changed = True
    while changed:
        changed = False
        for r in reach:
            more = set().union(*(reach[d] for d in r)) - r
            if more:
                r |= more
                changed = True
    return reach


def _should_build(args) -> bool:
    _, _, _, W, chunks, transfers, L = args
    if any(d >= len(transfers) for t in transfers for d in t.after):
        return False  # a dependency on no transfer
    reach = _waited_for(transfers, lambda t: t.after)
    for t in transfers:
        if t.id in reach[t.id] or (t.level == "intra" and t.src // L != t.dst // L):
            return False
        if not (t.reduce or chunks[t.chunk].owner == t.src or any(
                transfers[u].chunk == t.chunk and transfers[u].dst == t.src for u in reach[t.id])):
            return False  # it would copy rows the sender does not hold
    return True


def _run_on_engines(plan: ir.Plan, moves: dict) -> None:
    """Run the lowered transfers as the engines do (each rank's in order, one at a time,
    each after its ``after`` slot has been raised on its rank) and assert: no rank waits
    forever, every chunk slot is raised by one transfer only, and every transfer surely
    starts after the plan's ``after`` transfers and after its chunk reached its sender
    (whatever the timing: only what the engines' order and waits guarantee counts)."""
    intra = {r: [t for t in plan.issued_by(r) if t.level == "intra"] for r in moves}
    for r in moves:
        assert len(moves[r]) == len(intra[r])
    raised: dict[tuple[int, int], int] = {}  # (chunk, rank) -> transfer that raised it
    before: dict[int, set[int]] = {}  # transfer -> transfers surely landed before it starts
    done = {t.id for t in plan.transfers if t.level == "inter"}  # the network stage, first
    pos = dict.fromkeys(moves, 0)
    while True:
        progress = False
        for r in moves:
            if pos[r] == len(intra[r]):
                continue
            t, m = intra[r][pos[r]], moves[r][pos[r]]
            assert (m.src_rank, m.dst_rank, m.reduce) == (t.src, t.dst, t.reduce)
            assert (m.signal.index, m.signal.value) == (t.chunk, 7)
            sure = set(done) - {u.id for u in plan.transfers if u.level == "intra"}
            if pos[r]:
                prev = intra[r][pos[r] - 1].id
                sure |= {prev} | before[prev]
            if m.after is not None:
                assert (m.after.index, m.after.value) == (t.chunk, 7)
                if (t.chunk, r) not in raised:
                    continue  # the engine waits
                u = raised[(t.chunk, r)]
                sure |= {u} | before[u]
            before[t.id] = sure
            assert set(t.after) <= sure, (plan, t, "started before its dependencies")
            assert t.reduce or plan.chunks[t.chunk].owner == t.src or any(
                plan.transfers[u].chunk == t.chunk and plan.transfers[u].dst == t.src
                for u in sure), (plan, t, "moved rows its sender may not hold yet")
            assert (t.chunk, t.dst) not in raised, (plan, t, "a chunk's slot raised twice")
            raised[(t.chunk, t.dst)] = t.id
            done.add(t.id)
            pos[r] += 1
            progress = True
        if not progress:
            break
    assert all(pos[r] == len(intra[r]) for r in moves), (plan, pos, "an engine waits forever")


def test_hand_written_plans_are_refused_or_run_to_completion():
    """Random hand-written plans (5,000): built exactly when a brute-force check says they
    can run (no dependency cycle, no copy from a rank not holding the chunk, intra-node
    transfers within a node), immutable once built; lowered, every rank agrees (all lower
    it or all raise the same ``ValueError``), and a lowered plan, run as the engines run it
    on every rank, never waits forever, raises each slot once and never starts a transfer
    before what it depends on."""
    rng = random.Random(7)
    view = lambda c, _q: torch.zeros(c.rows, 1)  # noqa: E731
    built = lowered = waited = 0
    for trial in range(5000):
        args = _hand_written(rng)
        try:
            plan = ir.Plan(*args)
        except ValueError:
            assert not _should_build(args), (trial, args)
            continue
        assert _should_build(args), (trial, args)
        built += 1
        assert type(plan.chunks) is tuple and type(plan.transfers) is tuple
        with pytest.raises(AttributeError):
            plan.world_size = 1
        outcome: dict = {}
        for r in range(plan.world_size):
            try:
                outcome[r] = lowering.engine_transfers(plan, r, view, view, "pad", 7)
            except ValueError as exc:
                outcome[r] = str(exc)
        errors = {o for o in outcome.values() if isinstance(o, str)}
        assert not errors or (len(errors) == 1 and len(outcome) == len(
            [o for o in outcome.values() if isinstance(o, str)])), (trial, plan, outcome)
        if not errors:
            _run_on_engines(plan, outcome)
            lowered += 1
            waited += any(m.after is not None for moves in outcome.values() for m in moves)
    assert built > 3000 and lowered > 2500 and waited > 250, (built, lowered, waited)
