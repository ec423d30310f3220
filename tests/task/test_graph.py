"""Task graphs on the host: regions, derived waits and notifies, bad graphs."""

from __future__ import annotations

import pytest
import torch
import triton
import triton.language as tl

from ditron import task as dt


@triton.jit
def _noop(tile, x, n, BLOCK: tl.constexpr):
    pass


def _rows(t: torch.Tensor, block: int):
    return lambda tile, rank: [dt.region(t, (tile * block, (tile + 1) * block))]


def test_region_boxes_clip_and_validate():
    t = torch.empty(10, 6)
    assert dt.region(t).box == ((0, 10), (0, 6))
    assert dt.region(t, (8, 16)).box == ((8, 10), (0, 6))
    assert dt.region(t, slice(2, None), 3).box == ((2, 10), (3, 4))
    assert dt.region(t, (4, 4)).empty
    assert dt.region(t, (0, 5)).overlaps(dt.region(t, (4, 9)))
    assert not dt.region(t, (0, 5)).overlaps(dt.region(t, (5, 9)))
    assert not dt.region(t, (0, 5), (0, 3)).overlaps(dt.region(t, (0, 5), (3, 6)))
    with pytest.raises(ValueError, match="not within dimension 0"):
        dt.region(t, (11, 12))
    with pytest.raises(ValueError, match="3 ranges for a 2-d tensor"):
        dt.region(t, 0, 0, 0)
    with pytest.raises(ValueError, match="step"):
        dt.region(t, slice(0, 10, 2))
    with pytest.raises(TypeError, match="expected a tensor"):
        dt.region([1, 2])


def test_straddling_tiles_wait_for_every_producer_they_read():
    # producer tiles of 32 rows, consumer tiles of 48 rows over 100 rows
    buf, src, dst = torch.empty(100), torch.empty(100), torch.empty(100)
    g = dt.TaskGraph()
    g.add("produce", _noop, buf, 100, 32, tiles=4, reads=_rows(src, 32), writes=_rows(buf, 32))
    g.add("consume", _noop, buf, 100, 48, tiles=3, reads=_rows(buf, 48), writes=_rows(dst, 48))
    s = g.schedule(0, 1)
    assert s.n_items == 7
    assert [s.waits(i) for i in range(4)] == [[], [], [], []]
    # rows 0-48: producer tiles 0, 1; rows 48-96: tiles 1, 2; rows 96-100: tile 3
    assert [s.waits(4 + c) for c in range(3)] == [[0, 1], [1, 2], [3]]
    assert [s.notifies(i) for i in range(7)] == [[0]] * 4 + [[]] * 3
    assert s.begin_ranks == [] and s.tail_slots == []
    assert s.order == list(range(7))


def test_write_after_read_and_independent_tasks():
    a, b, c = torch.empty(64), torch.empty(64), torch.empty(64)
    g = dt.TaskGraph()
    g.add("read_a", _noop, a, 64, 16, tiles=4, reads=_rows(a, 16), writes=_rows(b, 16))
    g.add("other", _noop, c, 64, 16, tiles=4, reads=_rows(c, 16))
    g.add("write_a", _noop, a, 64, 32, tiles=2, writes=_rows(a, 32))
    s = g.schedule(0, 1)
    assert [s.waits(i) for i in range(4, 8)] == [[]] * 4  # "other" touches nothing shared
    assert [s.waits(8), s.waits(9)] == [[0, 1], [2, 3]]  # write after read


def test_waits_implied_by_other_waits_are_dropped():
    # a -> b -> c, and c also reads a's output: c need not wait for a (b did)
    x, y, z = torch.empty(32), torch.empty(32), torch.empty(32)
    g = dt.TaskGraph()
    g.add("a", _noop, x, 32, 16, tiles=2, writes=_rows(x, 16))
    g.add("b", _noop, x, 32, 16, tiles=2, reads=_rows(x, 16), writes=_rows(y, 16))
    g.add("c", _noop, x, 32, 32, tiles=1, reads=lambda t, r: [dt.region(x), dt.region(y)],
          writes=_rows(z, 32))
    s = g.schedule(0, 1)
    assert s.waits(2) == [0] and s.waits(3) == [1]
    assert s.waits(4) == [2, 3]


def test_cross_rank_waits_notifies_begin_and_tail():
    # each rank pushes tile t of its buffer into the next rank's inbox, then reads its own
    W, n = 3, 2
    inbox, src, out = torch.empty(2 * 8), torch.empty(2 * 8), torch.empty(2 * 8)

    def push(tile, rank):
        return [dt.region(inbox, (tile * 8, tile * 8 + 8), rank=(rank + 1) % W)]

    g = dt.TaskGraph()
    g.add("push", _noop, src, 16, 8, tiles=n, reads=_rows(src, 8), writes=push)
    g.add("use", _noop, inbox, 16, 8, tiles=n, reads=_rows(inbox, 8), writes=_rows(out, 8))
    items = 2 * n
    for r in range(W):
        s = g.schedule(r, W)
        left, right = (r - 1) % W, (r + 1) % W
        begin_right = W * items + right
        # a push waits for the right neighbour's start, and tells it when done
        assert s.waits(0) == [begin_right] and s.waits(1) == [begin_right]
        assert s.notifies(0) == [right] and s.notifies(1) == [right]
        # a use tile waits for the left neighbour's push of the same tile
        assert s.waits(2) == [left * items + 0] and s.waits(3) == [left * items + 1]
        # the left neighbour writes my memory: it waits for my start, my call ends after it
        assert s.begin_ranks == [left]
        assert s.tail_slots == [left * items + 0, left * items + 1]
        assert s.slots == W * items + W
        # who sets which slot, as the megakernel's timeout messages name them
        assert s.begin_slot(right) == begin_right and s.setter(begin_right) == (right, None)
        assert s.setter(left * items + 1) == (left, 1)
        assert dt.graph.describe_slot(g.tasks, s, left * items + 3) == \
            f"task 'use' tile 1 on rank {left}"
        assert dt.graph.describe_slot(g.tasks, s, begin_right) == \
            f"the start of rank {right}'s call"


def test_two_nodes_each_reach_their_own_peer():
    # 2 nodes of 2 ranks: every rank writes into its node peer's buffer, then reads its own
    W, local = 4, 2
    box, src = torch.empty(8), torch.empty(8)
    g = dt.TaskGraph()
    g.add("push", _noop, src, 8, 8, tiles=1,
          writes=lambda t, r: [dt.region(box, rank=r ^ 1)])
    g.add("use", _noop, box, 8, 8, tiles=1, reads=lambda t, r: [dt.region(box)])
    for r in range(W):
        s = g.schedule(r, W, local_world_size=local)
        assert s.waits(1) == [(r ^ 1) * 2 + 0]  # the node peer's push
        assert s.notifies(0) == [r ^ 1] and s.begin_ranks == [r ^ 1]


def test_tile_order_is_per_rank():
    x = torch.empty(40)
    g = dt.TaskGraph()
    g.add("t", _noop, x, 40, 8, tiles=5, writes=_rows(x, 8),
          order=lambda rank: [(i + rank) % 5 for i in range(5)])
    assert g.schedule(2, 4).order == [2, 3, 4, 0, 1]
    g2 = dt.TaskGraph()
    g2.add("t", _noop, x, 40, 8, tiles=5, order=lambda rank: [0, 1])
    with pytest.raises(ValueError, match="not a permutation"):
        g2.schedule(0, 1)


def test_bad_graphs_raise():
    x = torch.empty(32)
    g = dt.TaskGraph("bad")
    with pytest.raises(TypeError, match="must be a @triton.jit function"):
        g.add("py", lambda tile: None, tiles=1)
    with pytest.raises(TypeError, match="arguments do not match"):
        g.add("few", _noop, x, tiles=1)
    with pytest.raises(ValueError, match="tiles must be an int >= 0"):
        g.add("neg", _noop, x, 32, 8, tiles=-1)
    g.add("a", _noop, x, 32, 8, tiles=2)
    with pytest.raises(ValueError, match="already has a task named 'a'"):
        g.add("a", _noop, x, 32, 8, tiles=1)

    clash = dt.TaskGraph()
    clash.add("w", _noop, x, 32, 8, tiles=2, writes=lambda t, r: [dt.region(x, (t, 20))])
    with pytest.raises(ValueError, match="tiles of a task must be independent"):
        clash.schedule(0, 1)

    far = dt.TaskGraph()
    far.add("w", _noop, x, 32, 8, tiles=1, writes=lambda t, r: [dt.region(x, rank=3)])
    with pytest.raises(ValueError, match="tile 0 on rank 0 reaches rank 3, which is not a "
                                         r"rank of its node \(0..1\)"):
        far.schedule(2, 4, local_world_size=2)  # rank 2 derives rank 0's accesses too

    local = dt.TaskGraph()
    local.add("w", _noop, x, 32, 8, tiles=1, writes=lambda t, r: [dt.region(x, rank=1 - r)])
    with pytest.raises(ValueError, match="not symmetric"):
        local.schedule(0, 2, is_symmetric=lambda t: False)

    for got, named in (([x], "got a Tensor in it"), (1.5, "got float"),
                       (None, "got NoneType")):
        wrong = dt.TaskGraph()
        wrong.add("w", _noop, x, 32, 8, tiles=1, writes=lambda t, r, got=got: got)
        msg = r"task 'w': writes\(0, 0\) must return a ditron\.task\.region\(...\) box"
        with pytest.raises(TypeError, match=rf"{msg} or a list of them, {named}"):
            wrong.schedule(0, 1)


def test_reads_and_writes_may_return_one_region():
    """A single region is read as a list of one: the same schedule as the list form."""
    x, y = torch.empty(32), torch.empty(32)

    def build(wrap):
        g = dt.TaskGraph()
        g.add("a", _noop, x, 32, 8, tiles=4,
              writes=lambda t, r: wrap(dt.region(x, (8 * t, 8 * t + 8))))
        g.add("b", _noop, y, 32, 8, tiles=4,
              reads=lambda t, r: wrap(dt.region(x, (8 * t + 4, 8 * t + 12))),
              writes=lambda t, r: wrap(dt.region(y, (8 * t, 8 * t + 8))))
        return g.schedule(0, 1)

    one, listed = build(lambda reg: reg), build(lambda reg: [reg])
    assert one == listed and one.dep_slot  # b waits for two tiles of a each


def test_the_graph_runs_with_the_most_warps_a_task_asks_for():
    x = torch.empty(32)
    g = dt.TaskGraph("warps")
    assert g.num_warps() == dt.graph.DEFAULT_WARPS == 4
    g.add("a", _noop, x, 32, 8, tiles=1)
    g.add("b", _noop, x, 32, 8, tiles=1, warps=8)
    g.add("c", _noop, x, 32, 8, tiles=1, warps=2)
    assert [t.warps for t in g.tasks] == [None, 8, 2]
    assert g.num_warps() == 8
    for bad in (3, 0, 64, True, 8.0):
        with pytest.raises(ValueError, match="warps must be None or one of"):
            g.add("bad", _noop, x, 32, 8, tiles=1, warps=bad)
    assert len(g.tasks) == 3


def test_constexpr_parameters_are_found():
    g = dt.TaskGraph()
    task = g.add("t", _noop, torch.empty(4), 4, BLOCK=16, tiles=1)
    assert task.params == ("x", "n", "BLOCK")
    assert task.constexprs == (False, False, True)
    assert task.args[2] == 16
    assert "t: _noop x 1 tiles" in str(g)


@pytest.mark.parametrize("ndim", [0, 1, 2, 3])
def test_conflicting_pairs_match_all_pairs(ndim):
    """The grid that finds overlapping boxes finds exactly the pairs that comparing every
    pair finds: random boxes (thin, wide, whole-tensor ones) on random shapes."""
    from ditron.task.graph import _Access, _conflicting_pairs

    g = torch.Generator().manual_seed(ndim)

    def rand(hi: int) -> int:
        return int(torch.randint(0, hi, (), generator=g))

    for trial in range(40):
        shape = tuple(1 + rand(300) for _ in range(ndim))
        t = torch.empty(shape, device="meta")
        accs = []
        for item in range(1 + rand(60)):
            spans = []
            for size in shape:
                lo = rand(size)
                kind = rand(3)  # a thin box, a wide one, the whole dimension
                hi = lo + 1 + (rand(3) if kind == 0 else rand(size) if kind == 1 else size)
                spans.append((0, size) if kind == 2 else (lo, min(hi, size)))
            region = dt.region(t, *spans)
            accs.append(_Access(item // 2, item % 3, 0, region, rand(4) == 0))
        expected = [(i, j) for i in range(len(accs)) for j in range(i + 1, len(accs))
                    if (accs[i].write or accs[j].write)
                    and accs[i].region.overlaps(accs[j].region)]
        assert _conflicting_pairs(accs) == expected, (trial, shape)


def test_hand_made_regions_are_checked():
    """A ``Region`` built directly (not by ``region``) is checked where it is made: a box
    of the wrong rank or outside the tensor used to fail later in ``derive`` with "zip()
    argument 2 is shorter than argument 1", or to be taken as it was."""
    x = torch.empty(10, 4)
    with pytest.raises(ValueError, match=r"box \(\(0, 5\),\) must be one \(start, stop\) "
                                         r"pair of ints per dimension of the 2-d tensor"):
        dt.Region(x, ((0, 5),))
    with pytest.raises(ValueError, match=r"range \(20, 30\) of dimension 0 is outside the "
                                         r"tensor's shape \(10, 4\)"):
        dt.Region(x, ((20, 30), (0, 4)))
    with pytest.raises(ValueError, match=r"range \(-1, 2\) of dimension 1"):
        dt.Region(x, ((0, 1), (-1, 2)))
    with pytest.raises(ValueError, match="pair of ints"):
        dt.Region(x, ((0, 1.5), (0, 4)))
    with pytest.raises(TypeError, match="rank must be an int or None, got 1.5"):
        dt.Region(x, ((0, 1), (0, 4)), rank=1.5)
    reg = dt.Region(x, ((torch.tensor(2).item(), 3), (4, 2)), rank=True + 0)
    assert reg.box == ((2, 3), (4, 2)) and reg.empty and reg.rank == 1
    g = dt.TaskGraph()
    g.add("a", _noop, x, 32, 16, tiles=1, writes=lambda t, r: dt.Region(x, ((0, 5),)))
    with pytest.raises(ValueError, match="pair of ints per dimension"):
        g.schedule(0, 1)


def test_zero_size_regions_impose_no_waits():
    # empty boxes (a range with start == stop, a tensor with a zero dimension) conflict
    # with nothing: the consumer waits only for the producer tile that wrote its rows
    x, e = torch.empty(32), torch.empty(0, 5)
    g = dt.TaskGraph()
    g.add("w", _noop, x, 32, 8, tiles=2,
          writes=lambda t, r: [dt.region(x, (8 * t, 8 * t + 8)), dt.region(e),
                               dt.region(x, (30, 30))])
    g.add("r", _noop, x, 32, 8, tiles=2,
          reads=lambda t, r: [dt.region(x, (8 * t, 8 * t)), dt.region(e), dt.region(x, (t, 1))])
    s = g.schedule(0, 1)
    assert [s.waits(i) for i in range(4)] == [[], [], [0], []]


@triton.autotune(configs=[triton.Config({"BLOCK": 16})], key=[])
@triton.jit
def _autotuned(tile, x, n, BLOCK: tl.constexpr):
    pass


def test_autotuned_or_heuristic_functions_are_refused():
    # their signature is (*args, **kwargs): "parameter 'args' of _autotuned must be
    # positional", which did not say what was wrong
    x = torch.empty(32)
    g = dt.TaskGraph()
    heuristic = triton.heuristics({"BLOCK": lambda args: 16})(_noop)
    for fn, kind in ((_autotuned, "Autotuner"), (heuristic, "Heuristics")):
        with pytest.raises(TypeError, match=f"fn must be the @triton.jit function itself, "
                                            f"not the {kind} of an autotune / heuristics"):
            g.add("t", fn, x, 32, tiles=1)
    assert not g.tasks


def test_region_ranges_must_be_integers():
    # a float range was truncated (``(t * n / 2, ...)``: a box off by part of an element,
    # and wrong waits), while a NumPy int index was refused; integers of any kind count
    import numpy as np

    t = torch.empty(10, 6)
    for bad in ((0.5, 3.7), (torch.tensor(1.0), 3)):
        with pytest.raises(TypeError, match=r"range \(.*\) of dimension 0 must be a pair of "
                                            r"integers"):
            dt.region(t, bad)
    with pytest.raises(TypeError, match="takes a slice, an int or a"):
        dt.region(t, 2.0)
    assert dt.region(t, np.int64(3), (np.int32(1), torch.tensor(4))).box == ((3, 4), (1, 4))
    assert dt.region(t, -1).box == ((9, 10), (0, 6))
