"""Regions of different views of one buffer: waits derived where their elements meet (slices
with or without steps, rows, transposes, reshapes, other dtypes), none where they do not,
and a ``ValueError`` at compile where the boxes cannot be compared (overlapping windows
both) and their bytes meet. Host schedules, a random check against the views' elements,
and megakernels on 1-2 ranks against torch."""

from __future__ import annotations

import random

import pytest
import torch
import triton
import triton.language as tl

import ditron
import ditron.language as dl
from ditron import task as dt
from ditron.task.region import Frame, regions_meet

from ..ops.poison import poison_empty


@triton.jit
def _noop(tile, x, n, BLOCK: tl.constexpr):
    pass


def _pair(write: dt.Region, other: dt.Region, other_writes: bool = False) -> dt.Schedule:
    """The schedule of task ``a`` writing ``write`` and task ``b`` accessing ``other``."""
    g = dt.TaskGraph()
    g.add("a", _noop, write.tensor, 1, 1, tiles=1, writes=lambda t, r: [write])
    g.add("b", _noop, other.tensor, 1, 1, tiles=1,
          **{"writes" if other_writes else "reads": lambda t, r: [other]})
    return g.schedule(0, 1)


def _waits(write: dt.Region, other: dt.Region, other_writes: bool = False) -> bool:
    return _pair(write, other, other_writes).waits(1) == [0]


def test_slices_of_one_buffer_wait_where_they_overlap():
    """The old code keyed regions by the exact view: a task reading ``buf`` did not wait for
    one writing ``buf[:, :64]`` (a silent race)."""
    buf = torch.empty(8, 128)
    left, right = buf[:, :64], buf[:, 64:]
    assert _waits(dt.region(left), dt.region(buf))
    assert _waits(dt.region(buf), dt.region(right))  # write after write, as the reader
    assert _waits(dt.region(left), dt.region(buf), other_writes=True)
    assert not _waits(dt.region(left), dt.region(right))
    assert not _waits(dt.region(left), dt.region(buf, slice(None), (64, 128)))
    assert _waits(dt.region(left, (2, 3), (63, 64)), dt.region(buf, (2, 3), (63, 64)))
    assert not _waits(dt.region(left, (2, 3), (63, 64)), dt.region(buf, (3, 4), (63, 64)))
    assert not _waits(dt.region(left, (2, 3), (63, 64)), dt.region(buf, (2, 3), (64, 65)))
    x = torch.empty(100)
    assert not _waits(dt.region(x[:40]), dt.region(x[40:]))
    assert _waits(dt.region(x[:41]), dt.region(x[40:]))
    assert _waits(dt.region(x, (50, 60)), dt.region(x[2:], (57, 58)))   # element 59
    assert not _waits(dt.region(x, (50, 60)), dt.region(x[2:], (58, 70)))
    # a row, a column, a transpose and a view with a dimension of one element more
    assert _waits(dt.region(buf[3]), dt.region(buf, (3, 4)))
    assert not _waits(dt.region(buf[3]), dt.region(buf, (4, 8)))
    assert _waits(dt.region(buf[:, 5]), dt.region(buf, (7, 8), (5, 6)))
    assert not _waits(dt.region(buf[:, 5]), dt.region(buf, slice(None), (6, 128)))
    assert _waits(dt.region(buf.t(), (10, 20), (0, 2)), dt.region(buf, (1, 2), (19, 20)))
    assert not _waits(dt.region(buf.t(), (10, 20), (0, 2)), dt.region(buf, (2, 8)))
    assert _waits(dt.region(buf.unsqueeze(1), (5, 6)), dt.region(buf[5:, 100:]))
    # interleaved columns never share an element
    assert not _waits(dt.region(buf[:, ::2]), dt.region(buf[:, 1::2]))
    assert _waits(dt.region(buf[:, ::2], slice(None), (1, 2)), dt.region(buf[:, 2:3]))


def test_tiles_wait_only_for_the_views_they_overlap():
    """Two tasks fill the halves of a buffer through views, tile by tile; a third reads it
    whole, in other tiles: each of its tiles waits for exactly the tiles that wrote its
    rows, in both halves."""
    buf = torch.empty(12, 16)
    halves = buf[:, :8], buf[:, 8:]
    g = dt.TaskGraph()
    for name, half in zip("lr", halves, strict=True):
        g.add(name, _noop, half, 1, 1, tiles=3,
              writes=lambda t, r, h=half: [dt.region(h, (4 * t, 4 * t + 4))])
    g.add("read", _noop, buf, 1, 1, tiles=2,
          reads=lambda t, r: [dt.region(buf, (6 * t, 6 * t + 6))])
    s = g.schedule(0, 1)
    assert [s.waits(i) for i in range(6)] == [[]] * 6
    assert s.waits(6) == [0, 1, 3, 4] and s.waits(7) == [1, 2, 4, 5]
    # tiles of one task whose views overlap clash, as boxes of one view do
    g = dt.TaskGraph()
    g.add("clash", _noop, buf, 1, 1, tiles=2,
          writes=lambda t, r: [dt.region(buf[:, t:], (0, 1), (0, 2))])
    with pytest.raises(ValueError, match="task 'clash': tile 0 on rank 0 and tile 1 on "
                                         "rank 0 access an overlapping box"):
        g.schedule(0, 1)


def test_views_on_other_ranks():
    """A push into a peer's slice of a (symmetric) buffer and the peer's read of the whole
    buffer: the reader waits for the pushing rank's tile; a push into the other slice, or
    into another rank's copy, gives no wait."""
    buf = torch.empty(4, 16)
    g = dt.TaskGraph()
    g.add("push", _noop, buf, 1, 1, tiles=2,
          writes=lambda t, r: [dt.region(buf[:, 8 * t:8 * t + 8], rank=r ^ 1)])
    g.add("read", _noop, buf, 1, 1, tiles=1,
          reads=lambda t, r: [dt.region(buf, slice(None), (0, 8))])
    for rank in (0, 1):
        s = g.schedule(rank, 2)
        assert s.waits(2) == [(rank ^ 1) * 3], rank  # the peer's push tile 0 only
        assert s.notifies(0) == [rank ^ 1] and s.notifies(1) == [rank ^ 1]


def test_reshapes_steps_and_dtypes_are_traced():
    """Views that are no slices of one another, once refused at compile, are compared by
    their elements: a step against none, ``x.view(-1)`` or a reshape against ``x``, a view
    as another dtype, a carve of a flat buffer straddling the rows of another."""
    x = torch.empty(6, 8)
    flat, ints, halves = x.view(-1), x.view(torch.int32), x.view(torch.int16)
    assert _waits(dt.region(flat, (8, 24)), dt.region(x, (2, 3)))
    assert _waits(dt.region(flat, (23, 24)), dt.region(x, 2, (7, 8)))
    assert not _waits(dt.region(flat, (8, 23)), dt.region(x, 2, (7, 8)))
    assert not _waits(dt.region(flat, (0, 16)), dt.region(x, (2, 6)))
    assert _waits(dt.region(x, 1), dt.region(ints, 1))
    assert not _waits(dt.region(x, 1), dt.region(ints, 2))
    assert _waits(dt.region(x, 1, (3, 4)), dt.region(halves, 1, (7, 8)))  # x[1, 3]'s top
    assert not _waits(dt.region(x, 1, (3, 4)), dt.region(halves, 1, (8, 16)))
    assert _waits(dt.region(x[:, ::2], 3), dt.region(x, 3), other_writes=True)
    assert _waits(dt.region(x[:, ::2], 3, (1, 2)), dt.region(x, 3, (2, 3)))
    assert not _waits(dt.region(x[:, ::2], 3, (1, 2)), dt.region(x, 3, (3, 8)))
    assert not _waits(dt.region(x[:, 1::2]), dt.region(x, slice(None), (0, 1)))
    split = x.unflatten(1, (2, 4))  # strides (8, 4, 1): x's rows carry into its pairs
    assert _waits(dt.region(split, 5, 1), dt.region(x, 5), other_writes=True)
    assert not _waits(dt.region(split, 5, 1), dt.region(x, 5, (0, 4)), other_writes=True)
    rows6 = x.view(8, 6)  # strides 6 and 8: no common frame; compared by addresses
    assert Frame.common(rows6, x) is None
    assert _waits(dt.region(rows6, 1, (0, 1)), dt.region(x, 0, (6, 7)))
    assert not _waits(dt.region(rows6, 1, (1, 6)), dt.region(x, 0, (6, 7)))
    assert not _waits(dt.region(x[:, ::3], 2), dt.region(x, 2, (1, 3)))
    assert _waits(dt.region(x[:, ::3], 2), dt.region(x, 2, (1, 4)))
    carve = flat[3:43].view(5, 8)  # row r is x[r, 3:] and x[r + 1, :3]
    assert Frame.common(carve, x) is None
    assert _waits(dt.region(carve, 0, (5, 6)), dt.region(x, 1, (0, 1)))
    assert not _waits(dt.region(carve, 0, (0, 5)), dt.region(x, 1, (0, 3)))
    assert _waits(dt.region(carve, 0), dt.region(flat, (10, 11)))  # framed from its start


def test_rows_wait_for_the_flat_chunks_they_overlap():
    """A task fills a (6, 10) buffer through its flat view in chunks of 16; one reading it
    by rows, another by a (4, 15) reshape: each tile waits for exactly the chunks holding
    its elements."""
    x = torch.empty(6, 10)
    flat, other = x.view(-1), x.view(4, 15)
    g = dt.TaskGraph()
    g.add("fill", _noop, x, 1, 1, tiles=4,
          writes=lambda t, r: dt.region(flat, (16 * t, 16 * t + 16)))
    g.add("rows", _noop, x, 1, 1, tiles=6, reads=lambda t, r: dt.region(x, t))
    g.add("cols", _noop, x, 1, 1, tiles=2,  # other[:, :7], other[:, 7:]
          reads=lambda t, r: dt.region(other, slice(None), (7 * t, 15 if t else 7)))
    s = g.schedule(0, 1)
    for t in range(6):
        assert s.waits(4 + t) == sorted({10 * t // 16, (10 * t + 9) // 16}), t
    assert s.waits(10) == [0, 1, 2, 3] and s.waits(11) == [0, 1, 2, 3]
    g = dt.TaskGraph()
    g.add("fill", _noop, x, 1, 1, tiles=4,
          writes=lambda t, r: dt.region(flat, (16 * t, 16 * t + 16)))
    g.add("head", _noop, x, 1, 1, tiles=1,  # other[:2, :1]: elements 0 and 15
          reads=lambda t, r: dt.region(other, (0, 2), (0, 1)))
    assert g.schedule(0, 1).waits(4) == [0]


def test_views_that_cannot_be_compared_are_refused_where_they_meet():
    """Boxes of overlapping windows both, of more than one window: neither is a few runs of
    bytes searched for in ordered elements, so compile refuses where their bytes meet."""
    x = torch.empty(32)
    pairs, triples = x.unfold(0, 4, 2), x.unfold(0, 4, 3)
    with pytest.raises(ValueError, match=r"task 'a' tile 0 on rank 0 writes the float32 "
                                         r"view of shape \(15, 4\), strides \(2, 1\), offset "
                                         r"0, and task 'b' tile 0 on rank 0 reads the float32 "
                                         r"view of shape \(10, 4\), strides \(3, 1\), offset "
                                         r"0: two views of one buffer on rank 0 .*name the "
                                         r"buffer by one tensor"):
        _pair(dt.region(pairs, (0, 2)), dt.region(triples, (1, 3)))
    # one window is ordered: compared by addresses
    assert _waits(dt.region(pairs, (0, 2)), dt.region(triples, 1))
    assert not _waits(dt.region(pairs, (0, 2)), dt.region(triples, 2))
    # bytes that do not meet, or reads only: nothing to refuse, no wait
    assert not _waits(dt.region(pairs, (0, 2)), dt.region(triples, (3, 5)))
    g = dt.TaskGraph()
    g.add("a", _noop, x, 1, 1, tiles=1, reads=lambda t, r: [dt.region(pairs)])
    g.add("b", _noop, x, 1, 1, tiles=1, reads=lambda t, r: [dt.region(triples)])
    assert g.schedule(0, 1).waits(1) == []
    # one tile reading one view and writing another: no other tile, nothing to refuse
    g = dt.TaskGraph()
    g.add("inplace", _noop, x, 1, 1, tiles=1, reads=lambda t, r: [dt.region(pairs)],
          writes=lambda t, r: [dt.region(triples)])
    assert g.schedule(0, 1).waits(0) == []


def test_views_whose_elements_share_memory():
    """Disjoint boxes of a view whose elements share memory may hold the same elements:
    an ``expand``-ed view's boxes are compared without its stride-0 dimensions (against
    other views too), overlapping windows (``unfold``) by the bytes they span."""
    x = torch.empty(16)
    wide = x.expand(4, 16)
    assert _waits(dt.region(wide, 0), dt.region(wide, 3))
    assert not _waits(dt.region(wide, 0, (0, 8)), dt.region(wide, 3, (8, 16)))
    assert _waits(dt.region(x, (2, 3)), dt.region(wide, 1, (2, 3)))
    assert not _waits(dt.region(x, (2, 3)), dt.region(wide, slice(None), (3, 5)))
    windows = x.unfold(0, 4, 2)  # (7, 4), strides (2, 1): window w is x[2w:2w + 4]
    assert _waits(dt.region(windows, 0), dt.region(windows, 1))
    assert not _waits(dt.region(windows, 0), dt.region(windows, 2))
    assert _waits(dt.region(x, (5, 6)), dt.region(windows, 2))  # by addresses
    assert not _waits(dt.region(x, (8, 9)), dt.region(windows, 2))
    assert not _waits(dt.region(x, (12, 16)), dt.region(windows, (0, 4)))


def _random_view(base: torch.Tensor, rng: random.Random) -> torch.Tensor:
    """A view of ``base`` (a 2-d tensor) made by torch's view ops."""
    v = base
    for _ in range(rng.randint(1, 4)):
        op = rng.randrange(11)
        d = rng.randrange(v.dim()) if v.dim() else 0
        if op == 0 and v.dim() and v.shape[d] > 1:  # a slice, a step now and then
            lo = rng.randrange(v.shape[d])
            hi = rng.randint(lo + 1, v.shape[d])
            step = rng.choice([1, 1, 2, 3])
            v = v.narrow(d, lo, hi - lo)[(slice(None),) * d + (slice(None, None, step),)]
        elif op == 1 and v.dim() >= 2:
            v = v.transpose(0, v.dim() - 1)
        elif op == 2 and v.dim() >= 2:
            v = v.select(d, rng.randrange(v.shape[d]))
        elif op == 3:
            v = v.unsqueeze(rng.randint(0, v.dim()))
        elif op == 4 and v.is_contiguous():
            v = v.view(-1)
            if v.numel() > 2 and rng.random() < 0.5:  # a carve of it, rows at any offset
                lo = rng.randrange(v.numel() // 2)
                n = v.numel() - lo
                rows = rng.choice([k for k in (2, 3, 4, 5) if n % k == 0] or [1])
                v = v[lo:].view(rows, n // rows)
        elif op == 5 and v.dim() and v.shape[-1] % 2 == 0 and v.stride(-1) == 1:
            v = v.unflatten(v.dim() - 1, (2, v.shape[-1] // 2))
        elif op == 6 and v.dim() and v.stride(-1) == 1 and rng.random() < 0.5:
            try:  # another dtype: elements of another size too
                v = v.view(rng.choice([torch.int32, torch.int16, torch.uint8,
                                       torch.float64]))
            except RuntimeError:  # sizes or offsets that do not divide
                pass
        elif op == 7:
            v = v.unsqueeze(0).expand(rng.randint(2, 3), *v.shape)
        elif op == 8 and v.is_contiguous() and v.numel() and v.numel() % 3 == 0:
            v = v.view(3, -1)  # a reshape across rows
        elif op == 9 and v.dim() and v.shape[-1] >= 4 and rng.random() < 0.3:
            v = v.unfold(v.dim() - 1, rng.choice([2, 3]), rng.choice([1, 2]))
        elif op == 10 and v.is_contiguous() and v.numel() % 2 == 0:
            v = v.view(-1, 2)
    return v


def _random_box(v: torch.Tensor, rng: random.Random) -> dt.Region:
    spans = []
    for n in v.shape:
        lo = rng.randrange(n)
        spans.append((lo, rng.randint(lo + 1, n)))
    return dt.region(v, *spans)


def _elements(region: dt.Region) -> set[int]:
    """The bytes of the region's elements (addresses), the truth the waits must follow."""
    t = region.tensor
    index = torch.zeros((), dtype=torch.int64)
    for (lo, hi), st in zip(region.box, t.stride(), strict=True):
        index = index[..., None] + torch.arange(lo, hi) * st
    first = t.data_ptr() + index.reshape(-1) * t.element_size()
    return {int(a) + b for a in first for b in range(t.element_size())}


@pytest.mark.parametrize("seed", range(4))
def test_random_views_wait_exactly_where_elements_meet(seed):
    """Random views of one buffer (slices with steps, transposes, rows, reshapes, carves at
    any offset, other dtypes, expanded, overlapping windows) and random boxes of two views
    or of one: a pair waits exactly where their elements share a byte, placed in a common
    frame or else compared by addresses; refused only where neither can compare them."""
    rng = random.Random(seed)
    base = torch.empty(rng.randint(2, 9), rng.choice([4, 6, 8, 12]))
    placed = by_address = 0
    for trial in range(150):
        va = _random_view(base, rng)
        vb = va if rng.random() < 0.25 else _random_view(base, rng)  # boxes of one view
        ra, rb = _random_box(va, rng), _random_box(vb, rng)
        meet = bool(_elements(ra) & _elements(rb))
        frame = Frame.common(va, vb)
        compared = regions_meet(ra, rb)
        assert compared is None or compared == meet, trial
        try:
            waits = _waits(ra, rb, other_writes=rng.random() < 0.5)
        except ValueError as exc:
            if "tiles of a task must be independent" in str(exc):  # one view's two boxes
                assert ra.key == rb.key and (meet or compared is None), trial
                continue
            assert "cannot be compared" in str(exc), (trial, str(exc))
            (lo, hi), (lo2, hi2) = ra.span, rb.span
            assert frame is None and compared is None and lo < hi2 and lo2 < hi, trial
            continue
        if ra.key == rb.key and frame is None and compared is None:  # by bytes: may wait more
            assert waits or not meet, trial
            continue
        assert waits == meet, (trial, va.shape, va.stride(), va.dtype, ra.box, vb.shape,
                               vb.stride(), vb.dtype, rb.box)
        if frame is not None:
            placed += 1
            assert frame.meet(ra, rb) == meet, trial
        else:
            by_address += 1
    assert placed > 30 and by_address > 5, (placed, by_address)


@triton.jit
def _push_half_tile(tile, x, buf, R, C: tl.constexpr, ctx, BLOCK: tl.constexpr):
    """Rank ``r``'s ``(r + 1) * x[rows]`` into its right neighbour's ``buf[rows, :C]``."""
    rows = tile * BLOCK + tl.arange(0, BLOCK)[:, None]
    cols = tl.arange(0, C)[None, :]
    mask = rows < R
    right = (ctx.rank + 1) % ctx.world_size
    v = tl.load(x + rows * C + cols, mask=mask) * (ctx.rank + 1)
    dl.store(buf + rows * (2 * C) + cols, v, right, ctx, mask=mask)


@triton.jit
def _fill_half_tile(tile, x, buf, R, C: tl.constexpr, BLOCK: tl.constexpr):
    """``buf[rows, C:] = 2 * x[rows]``."""
    rows = tile * BLOCK + tl.arange(0, BLOCK)[:, None]
    cols = tl.arange(0, C)[None, :]
    mask = rows < R
    tl.store(buf + rows * (2 * C) + C + cols, 2 * tl.load(x + rows * C + cols, mask=mask),
             mask=mask)


@triton.jit
def _add_halves_tile(tile, buf, out, R, C: tl.constexpr, BLOCK: tl.constexpr):
    """``out[rows] = buf[rows, :C] + buf[rows, C:]``."""
    rows = tile * BLOCK + tl.arange(0, BLOCK)[:, None]
    cols = tl.arange(0, C)[None, :]
    mask = rows < R
    row = buf + rows * (2 * C) + cols
    tl.store(out + rows * C + cols, tl.load(row, mask=mask) + tl.load(row + C, mask=mask),
             mask=mask)


def _halves_case(calls: int) -> int:
    """Each rank pushes ``(r + 1) x_r`` into its right neighbour's left half of a symmetric
    ``buf`` (named ``buf[:, :C]``), fills its own right half (``buf[:, C:]``) with ``2 x_r``,
    then adds the halves, reading ``buf`` (even tiles) or ``buf.t()`` (odd ones): each
    adding tile waits for the left neighbour's push of its rows and its own fill."""
    poison_empty()
    w = ditron.world()
    W, me = w.world_size, w.rank
    left = (me - 1) % W
    R, C, B = 10, 8, 4
    T = -(-R // B)
    x = torch.empty(R, C, device=w.device)
    out = torch.empty(R, C, device=w.device)
    buf = ditron.empty((R, 2 * C), torch.float32)
    rows = [(t * B, t * B + B) for t in range(T)]
    g = dt.TaskGraph("halves")
    g.add("push", _push_half_tile, x, buf, R, C, dt.CTX, B, tiles=T,
          reads=lambda t, r: dt.region(x, rows[t]),
          writes=lambda t, r: dt.region(buf[:, :C], rows[t], rank=(r + 1) % W))
    g.add("fill", _fill_half_tile, x, buf, R, C, B, tiles=T,
          reads=lambda t, r: dt.region(x, rows[t]),
          writes=lambda t, r: dt.region(buf[:, C:], rows[t]))
    g.add("add", _add_halves_tile, buf, out, R, C, B, tiles=T,
          reads=lambda t, r: (dt.region(buf, rows[t]) if t % 2 == 0
                              else dt.region(buf.t(), slice(None), rows[t])),
          writes=lambda t, r: dt.region(out, rows[t]))
    mk = g.compile()
    n = mk.schedule.n_items
    for t in range(T):
        assert mk.schedule.waits(2 * T + t) == sorted([left * n + t, me * n + T + t]), t
    for call in range(calls):
        xs = torch.randn(W, R, C, generator=torch.Generator().manual_seed(1000 + call))
        x.copy_(xs[me])
        buf.fill_(float("nan"))  # peers push only once this call has started here
        out.fill_(float("nan"))
        mk()
        ref = (left + 1) * xs[left] + 2 * xs[me]
        torch.testing.assert_close(out.cpu(), ref, rtol=1e-6, atol=1e-6)
    mk.free()
    return calls


@pytest.mark.parametrize("world_size", [1, 2])
def test_megakernel_over_views_of_one_buffer(world_size, backend):
    assert ditron.launch(_halves_case, world_size, 3, backend=backend) == [3] * world_size


def _refused_case() -> str:
    w = ditron.world()
    x = torch.empty(32, device=w.device)
    pairs, triples = x.unfold(0, 4, 2), x.unfold(0, 4, 3)  # overlapping windows both
    g = dt.TaskGraph("refused")
    g.add("write", _noop, x, 1, 1, tiles=1, writes=lambda t, r: dt.region(pairs, (0, 2)))
    g.add("read", _noop, x, 1, 1, tiles=1, reads=lambda t, r: dt.region(triples, (0, 2)))
    with pytest.raises(ValueError, match="cannot be compared") as info:
        g.compile()
    return str(info.value)


def test_compile_refuses_on_every_rank(backend):
    """Every rank raises, before any kernel runs, naming the tiles and views."""
    for msg in ditron.launch(_refused_case, 2, backend=backend):
        assert msg.startswith("task 'write' tile 0 on rank 0 writes the float32 view of "
                              "shape (15, 4)"), msg


def _peer_view_case() -> list[str]:
    """A region naming the right neighbour's copy by its ``ditron.peer`` view (another
    address on this process) instead of ``rank=``; then the same graph named by ``rank=``
    compiles."""
    w = ditron.world()
    W = w.world_size
    buf = ditron.zeros((W, 8))
    ditron.barrier()
    errors = []
    for name_it in (lambda r: dt.region(ditron.peer(buf, (r + 1) % W), r),
                    lambda r: dt.region(buf, r, rank=(r + 1) % W)):
        g = dt.TaskGraph("peer_view")
        g.add("push", _noop, buf, 1, 1, tiles=1, writes=lambda t, r, f=name_it: f(r))
        g.add("read", _noop, buf, 1, 1, tiles=1,
              reads=lambda t, r: dt.region(buf, (r - 1) % W))
        try:
            g.compile().free()
        except ValueError as exc:
            errors.append(str(exc))
    return errors


@pytest.mark.parametrize("world_size", [2, 3])
def test_regions_of_peer_views_are_refused(world_size, backend):
    # before: a view of a peer's heap counted as memory of the rank running the tile, so the
    # reader on the peer got no wait for the push into its row (a silent race)
    for errors in ditron.launch(_peer_view_case, world_size, backend=backend):
        assert len(errors) == 1, errors
        assert "names a view of rank" in errors[0] and "(ditron.peer)" in errors[0], errors
