"""What a task graph must refuse: tensor dtypes that differ across ranks (at compile, on
every rank, before any kernel runs), region boxes given as Python ranges or bools, and
calls of a megakernel whose earlier call stopped part way."""

from __future__ import annotations

import contextlib
import io
import re

import pytest
import torch
import triton
import triton.language as tl
from triton.tools.tensor_descriptor import TensorDescriptor

import ditron
from ditron import task as dt


@triton.jit
def _scale_tile(tile, x, y, n, factor, BLOCK: tl.constexpr):
    offs = tile * BLOCK + tl.arange(0, BLOCK)
    tl.store(y + offs, tl.load(x + offs, mask=offs < n) * factor, mask=offs < n)


@triton.jit
def _scale_pair_tile(tile, x, pair, BLOCK: tl.constexpr):
    offs = tile * BLOCK + tl.arange(0, BLOCK)
    tl.store(x + offs, tl.load(x + offs) * pair[0] + pair[1])


def _mixed_dtypes_case() -> list[str]:
    """Rank 1 gives one task a bf16 tensor, then a tuple of other element types, where
    rank 0 gives fp32 / ints; then both give one operand as a tensor on one rank and as
    its TMA descriptor on the other (which ranks may), and it runs."""
    w = ditron.world()
    me = w.rank
    got = []
    x = torch.ones(16, device=w.device)
    odd = torch.ones(16, dtype=torch.bfloat16 if me == 1 else torch.float32, device=w.device)
    g = dt.TaskGraph("mixed dtypes")
    g.add("scale", _scale_tile, odd, x, 16, 2.0, 16, tiles=1,
          reads=lambda t, r: dt.region(odd), writes=lambda t, r: dt.region(x))
    with pytest.raises(ValueError) as info:
        g.compile()
    got.append(str(info.value))
    g = dt.TaskGraph("mixed tuple")
    g.add("scale", _scale_pair_tile, x, (2, 1.0 if me == 1 else 1), 16, tiles=1,
          writes=lambda t, r: dt.region(x))
    with pytest.raises(ValueError) as info:
        g.compile()
    got.append(str(info.value))
    src = torch.arange(16.0, device=w.device).view(1, 16)
    arg = TensorDescriptor(src, [1, 16], [16, 1], [1, 16]) if me == 0 else src
    g = dt.TaskGraph("descriptor or tensor")
    g.add("scale", _scale_tile, arg, x, 16, 2.0, 16, tiles=1,
          reads=lambda t, r: dt.region(src), writes=lambda t, r: dt.region(x))
    g.compile()  # agreed: the same dtype, loaded either way
    return got


def test_tensor_dtypes_that_differ_across_ranks_raise_on_every_rank(backend, monkeypatch):
    """Rank 1's tile compiled for (or, in the interpreter, ran on) a bf16 pointer where
    rank 0's took fp32: a tile whose dot mixed the two failed on rank 1 at its first call
    while rank 0 waited for rank 1's tiles (until the wait timeout: forever on a GPU)."""
    monkeypatch.setenv("DITRON_LAUNCH_TIMEOUT", "60")
    got = ditron.launch(_mixed_dtypes_case, 2, backend=backend)
    for msg in (m for per_rank in got for m in per_rank[:1]):
        assert "graph 'mixed dtypes': ranks disagree on the call (argument_kinds differs)" \
            in msg, msg
        assert "tensor of torch.bfloat16" in msg and "tensor of torch.float32" in msg, msg
    for msg in (per_rank[1] for per_rank in got):
        assert "graph 'mixed tuple': ranks disagree on the call (argument_kinds differs)" \
            in msg and "tuple(int, float)" in msg and "tuple(int, int)" in msg, msg


def test_ranges_and_bools_in_regions():
    """A ``range`` of two indices was read as a (start, stop) pair of its elements
    (``range(2, 4)``: rows 2..3, the box (2, 3), one row short: a missed dependency); other
    ranges raised. A ``bool`` was taken for the index 0 or 1."""
    t = torch.empty(10, 6)
    assert dt.region(t, range(2, 4)).box == ((2, 4), (0, 6))
    assert dt.region(t, range(8, 16), range(1, 2)).box == ((8, 10), (1, 2))
    assert dt.region(t, range(4, 2)).empty
    with pytest.raises(ValueError, match="dimension 0 has step 2"):
        dt.region(t, range(0, 4, 2))
    with pytest.raises(ValueError, match="not within dimension 0"):
        dt.region(t, range(11, 12))
    with pytest.raises(TypeError, match="takes a slice, an int or a"):
        dt.region(t, True)
    with pytest.raises(TypeError, match="must be a pair of integers"):
        dt.region(t, (False, 3))
    # a task reading rows range(2t, 2t + 2) waits for both producer tiles of those rows
    buf = torch.empty(4)
    g = dt.TaskGraph()
    g.add("produce", _scale_tile, buf, buf, 4, 1.0, 1, tiles=4,
          writes=lambda tile, rank: dt.region(buf, range(tile, tile + 1)))
    g.add("consume", _scale_tile, buf, buf, 4, 1.0, 2, tiles=2,
          reads=lambda tile, rank: dt.region(buf, range(2 * tile, 2 * tile + 2)))
    s = g.schedule(0, 1)
    assert [s.waits(4), s.waits(5)] == [[0, 1], [2, 3]]


@triton.jit
def _inc_tile(tile, x, y, BLOCK: tl.constexpr):
    offs = tile * BLOCK + tl.arange(0, BLOCK)
    tl.store(y + offs, tl.load(x + offs) + 1)


@triton.jit
def _double_printing_tile(tile, y, z, BLOCK: tl.constexpr):
    offs = tile * BLOCK + tl.arange(0, BLOCK)
    tl.device_print("tile", tile)  # the interpreter prints from the host: a way to stop it
    tl.store(z + offs, tl.load(y + offs) * 2)


class _Interrupting(io.StringIO):
    def write(self, text: str) -> int:
        raise KeyboardInterrupt  # as Ctrl-C in a notebook, while the interpreter runs


def _interrupted_case() -> list[str]:
    """z = 2 (x + 1) in two tasks; the first call stops at the first tile of the second
    task. The next call took up the rest of that call under its epoch: it skipped the
    first task's tiles and its second task read the stale y, silently."""
    n, block = 16, 4
    dev = ditron.world().device
    x, y, z = (torch.empty(n, device=dev) for _ in range(3))

    def rows(t, tile):
        return dt.region(t, (tile * block, tile * block + block))

    def build():
        g = dt.TaskGraph("interrupted")
        g.add("inc", _inc_tile, x, y, block, tiles=n // block,
              reads=lambda t, r: rows(x, t), writes=lambda t, r: rows(y, t))
        g.add("double", _double_printing_tile, y, z, block, tiles=n // block,
              reads=lambda t, r: rows(y, t), writes=lambda t, r: rows(z, t))
        return g.compile()

    mk = build()
    got = []
    with pytest.raises(KeyboardInterrupt), contextlib.redirect_stdout(_Interrupting()):
        mk()
    x.copy_(torch.randn(n))
    y.fill_(float("nan"))
    z.fill_(float("nan"))
    with pytest.raises(RuntimeError) as info, contextlib.redirect_stdout(io.StringIO()):
        mk()
    got.append(str(info.value))
    mk.free()
    mk = build()  # compiled again: runs whole calls
    for _ in range(2):
        x.copy_(torch.randn(n))
        z.fill_(float("nan"))
        with contextlib.redirect_stdout(io.StringIO()):
            mk()
        assert torch.equal(z.cpu(), (2 * (x + 1)).cpu())
    return got


def test_a_call_stopped_part_way_refuses_later_calls():
    # the interpreter (CPU backend) is what an interrupt stops inside a call
    (msg,), = ditron.launch(_interrupted_case, 1, backend="cpu")
    assert msg.startswith("ditron.task: a call of the megakernel of graph 'interrupted' "
                          "failed (KeyboardInterrupt: ) part way"), msg


def test_regions_given_instead_of_functions_are_refused_when_added():
    """``reads=dt.region(x)`` (not a function of ``(tile, rank)``) raised "'Region' object
    is not callable" at compile, naming no task; a list of regions the same, and an empty
    one was taken for no regions."""
    x = torch.empty(16)
    g = dt.TaskGraph()
    for kw, what in (({"reads": dt.region(x)}, "reads must be a function of (tile, rank), "
                      "got Region"),
                     ({"writes": [dt.region(x)]}, "writes must be a function of (tile, rank), "
                      "got list"),
                     ({"writes": []}, "writes must be a function of (tile, rank), got list"),
                     ({"order": [0]}, "order must be a function of rank, got list")):
        with pytest.raises(TypeError, match=f"task 'a': {re.escape(what)}"):
            g.add("a", _scale_tile, x, x, 16, 2.0, 16, tiles=1, **kw)
    assert not g.tasks
