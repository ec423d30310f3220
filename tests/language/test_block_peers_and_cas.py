"""Blocks of peers and of compare-and-swaps: masked-off lanes may hold any peer (their
heap base is never read), and ``atomic_cas`` on a block takes scalar operands as the other
atomics do."""

from __future__ import annotations

import pytest
import torch
import triton
import triton.language as tl

import ditron
import ditron.language as dl

BLOCK = 8


@triton.jit
def masked_peer_lanes(x, out, n, far, ctx, BLOCK: tl.constexpr):
    """Lanes ``< n`` read the right neighbour's ``x`` (both translations) and write ten
    times their own into the left neighbour's ``x[BLOCK:]``; masked-off lanes hold the peer
    ``far``."""
    offs = tl.arange(0, BLOCK)
    mask = offs < n
    right = tl.where(mask, (ctx.rank + 1) % ctx.world_size, far)
    left = tl.where(mask, (ctx.rank + ctx.world_size - 1) % ctx.world_size, far)
    tl.store(out + offs, dl.load(x + offs, right, ctx, mask, -1.0), mask=offs < BLOCK)
    each = dl.translate_each(x + offs, right, ctx)
    tl.store(out + BLOCK + offs, tl.load(each, mask=mask, other=-2.0))
    dl.store(x + BLOCK + offs, tl.load(x + offs) * 10.0, left, ctx, mask=mask)


@triton.jit
def block_cas(cells, out, ctx, BLOCK: tl.constexpr):
    """Every lane swaps 0 for ``rank + 10`` in the right neighbour's cell (scalar operands)."""
    offs = tl.arange(0, BLOCK)
    right = (ctx.rank + 1) % ctx.world_size
    tl.store(out + offs, dl.atomic_cas(cells + offs, 0, ctx.rank + 10, right, ctx))


def _masked_peers(n: int) -> list[bool]:
    w = ditron.world()
    W, me = w.world_size, w.rank
    gen = torch.Generator().manual_seed(7)
    data = torch.randn(W, BLOCK, generator=gen)
    x = ditron.empty((2 * BLOCK,), torch.float32)
    x[:BLOCK] = data[me].to(w.device)
    x[BLOCK:] = float("nan")
    ok = []
    for far in (W, -1, 2**40, -(2**40)):  # past the table of bases, before it, far out
        out = torch.full((2 * BLOCK,), float("nan"), device=w.device)
        x[BLOCK:] = float("nan")
        ditron.barrier()
        masked_peer_lanes[(1,)](x, out, n, far, ditron.context(), BLOCK=BLOCK)
        ditron.barrier()
        right = data[(me + 1) % W]  # what this rank reads, and what its right writes
        want_out = torch.cat([right[:n], torch.full((BLOCK - n,), -1.0),
                              right[:n], torch.full((BLOCK - n,), -2.0)])
        want_x = torch.cat([right[:n] * 10, torch.full((BLOCK - n,), float("nan"))])
        ok.append(torch.equal(out.cpu(), want_out)
                  and torch.allclose(x[BLOCK:].cpu(), want_x, equal_nan=True))
    return ok


@pytest.mark.parametrize("world_size", [1, 3])
def test_masked_off_lanes_may_hold_any_peer(backend, world_size):
    """An out-of-range peer in a masked-off lane once read past the table of heap bases
    (a SIGSEGV on the CPU backend for a far one, an illegal address on a GPU)."""
    results = ditron.launch(_masked_peers, world_size, 5, backend=backend)
    assert results == [[True] * 4] * world_size, results


def _cas_block() -> tuple[list[int], list[int]]:
    w = ditron.world()
    cells = ditron.zeros((BLOCK,), torch.int64)
    cells[1::2] = -3  # these never match 0
    out = torch.full((BLOCK,), -7, dtype=torch.int64, device=w.device)
    ditron.barrier()
    block_cas[(1,)](cells, out, ditron.context(), BLOCK=BLOCK)
    ditron.barrier()
    return out.tolist(), cells.tolist()


@pytest.mark.parametrize("world_size", [1, 2])
def test_atomic_cas_on_a_block_broadcasts_scalars(backend, world_size):
    """A block of pointers with scalar compare and value once failed in Triton ("cannot
    reshape array of size 1" on the CPU backend)."""
    results = ditron.launch(_cas_block, world_size, backend=backend)
    for rank, (old, cells) in enumerate(results):
        left = (rank - 1) % world_size
        assert old == [0, -3] * (BLOCK // 2)
        assert cells == [left + 10, -3] * (BLOCK // 2)
