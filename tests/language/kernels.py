"""Tiny kernels exercising one primitive each (shared by the primitive tests)."""

from __future__ import annotations

import triton
import triton.language as tl

import ditron.language as dl


@triton.jit
def push_ring(src, dst, sig, epoch, n, BLOCK: tl.constexpr, ctx):
    """Store ``src`` into the right neighbour's ``dst``, then notify it; wait for the left."""
    right = (ctx.rank + 1) % ctx.world_size
    offs = tl.arange(0, BLOCK)
    dl.store(dst + offs, tl.load(src + offs, mask=offs < n), right, ctx, mask=offs < n)
    dl.notify(sig, epoch, right, ctx)
    dl.wait(sig, epoch, ctx)


@triton.jit
def pull_ring(src, dst, n, BLOCK: tl.constexpr, ctx):
    """Load the left neighbour's ``src`` into the local ``dst`` (data published by a barrier)."""
    left = (ctx.rank + ctx.world_size - 1) % ctx.world_size
    offs = tl.arange(0, BLOCK)
    tl.store(dst + offs, dl.load(src + offs, left, ctx, mask=offs < n, other=0.0), mask=offs < n)


@triton.jit
def all_to_all_tiles(src, dst, sig, epoch, TILE: tl.constexpr, ctx):
    """Program ``p`` sends tile ``p`` of ``src`` to rank ``p`` at slot ``rank`` of its ``dst``.

    Every program notifies its peer; program ``p`` then waits for the tile from rank ``p``.
    Waits target other ranks only, so the interpreter's sequential programs cannot deadlock.
    """
    peer = tl.program_id(0)
    offs = tl.arange(0, TILE)
    tile = tl.load(src + peer * TILE + offs)
    dl.store(dst + ctx.rank * TILE + offs, tile, peer, ctx)
    dl.notify(sig + ctx.rank, epoch, peer, ctx)
    dl.wait(sig + peer, epoch, ctx)


@triton.jit
def count_up(counter, ctx, PER_PROGRAM: tl.constexpr):
    """Every program adds 1 to each peer's counter, PER_PROGRAM times."""
    i = 0
    while i < PER_PROGRAM:
        peer = 0
        while peer < ctx.world_size:
            dl.atomic_add(counter, 1, peer, ctx)
            peer += 1
        i += 1


@triton.jit
def exchange_ops(cells, out, ctx):
    """cas, xchg and max on the right neighbour's cells; old values into local ``out``."""
    right = (ctx.rank + 1) % ctx.world_size
    tl.store(out + 0, dl.atomic_cas(cells + 0, 0, ctx.rank + 10, right, ctx))
    tl.store(out + 1, dl.atomic_cas(cells + 1, 12345, 7, right, ctx))  # never matches
    tl.store(out + 2, dl.atomic_xchg(cells + 2, ctx.rank + 100, right, ctx))
    tl.store(out + 3, dl.atomic_max(cells + 3, ctx.rank + 1000, right, ctx))
    dl.fence(ctx)


@triton.jit
def self_translate(x, out, ctx):
    """Translating to the own rank is the identity."""
    p = dl.translate(x, ctx.rank, ctx)
    same = p.to(tl.uint64, bitcast=True) == x.to(tl.uint64, bitcast=True)
    tl.store(out, same.to(tl.int64))
    tl.store(out + 1, dl.rank(ctx))
    tl.store(out + 2, dl.world_size(ctx))


@triton.jit
def wait_forever(sig, target, ctx):
    dl.wait(sig + 1, target, ctx)


@triton.jit
def get_from_left(src, dst, n, BLOCK: tl.constexpr, ctx):
    """Bulk-copy the left neighbour's ``src`` into local ``dst`` (published by a barrier)."""
    left = (ctx.rank + ctx.world_size - 1) % ctx.world_size
    dl.get(dst, src, n, left, ctx, BLOCK)


@triton.jit
def wait_block(sig, value, n, out, BLOCK: tl.constexpr, ctx):
    """Wait until the first ``n`` local signals reach ``value``; store the least seen."""
    offs = tl.arange(0, BLOCK)
    tl.store(out, dl.wait_all(sig + offs, value, ctx, mask=offs < n))


@triton.jit
def push_lanes(dst, sig, epoch, n, ctx):
    """For each lane ``i < n`` in turn: store ``epoch * (i + 1)`` into the right
    neighbour's ``dst[i]``, then raise its signal ``i`` to ``epoch``."""
    right = (ctx.rank + 1) % ctx.world_size
    i = 0
    while i < n:
        dl.store(dst + i, epoch * (i + 1), right, ctx)
        dl.notify(sig + i, epoch, right, ctx)
        i += 1


@triton.jit
def wait_lanes_then_read(sig, data, epoch, n, out, BLOCK: tl.constexpr, ctx):
    """Wait until the first ``n`` local signals reach ``epoch``, then read ``data``:
    ``out[0]`` is the least signal value seen, ``out[1 + i]`` is ``data[i]``."""
    offs = tl.arange(0, BLOCK)
    tl.store(out, dl.wait_all(sig + offs, epoch, ctx, mask=offs < n))
    tl.store(out + 1 + offs, tl.load(data + offs, mask=offs < n), mask=offs < n)


@triton.jit
def notify_self(sig, value, ctx, OP: tl.constexpr):
    """``dl.notify`` of the own signal with ``op=OP``."""
    dl.notify(sig, value, ctx.rank, ctx, op=OP)
