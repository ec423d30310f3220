"""Fused collectives: one kernel per call, epochs kept on the device (CUDA-graph safe).

All-reduce (one-shot, two-shot), reduce-scatter and all-gather among the ranks of one node,
each a single launch. The host keeps no per-call state, so a replayed CUDA graph runs the
same launch again and stays correct. The kernel uses the foundation's epoch protocol (signals
only grow; ``wait`` for ``>= epoch``), with the epoch counted on the device by each program:

* Workspace (per mode, dtype and size bucket; :class:`Workspace`): a symmetric buffer with two
  halves (``epoch % 2``), each holding a copy of the input (``cap`` elements) and, for
  two-shot, a reduced segment (``ceil(cap / W)``); a symmetric signal pad of ``2 * P * W``
  slots (slot sets A and B, one row of ``W`` per program); a local int64 epoch counter per
  program. ``P`` is fixed per workspace, so all counters of all ranks advance together.
* Program ``p`` of rank ``r``, call with epoch ``e`` (its counter + 1), half ``h = e % 2``:

  1. copies its slice of every segment of the input into ``in[h]``;
  2. barrier A: sets slot ``A[p][r]`` of every peer to ``e`` (release, system scope), waits
     until its own ``A[p][q] >= e`` for every peer ``q`` (acquire): the peers' program ``p``
     have published the same slices;
  3. by mode:

     - ``ALL_REDUCE`` (one-shot): sums its slice over every rank's ``in[h]`` (rank order,
       fp32) into ``out``;
     - ``REDUCE_SCATTER``: the same for its slice of segment ``r``, into ``out`` (one segment);
     - ``TWO_SHOT``: as reduce-scatter, also into its own ``red[h]``; barrier B (slot set B);
       then copies its slice of every other segment ``s`` from rank ``s``'s ``red[h]``;
     - ``ALL_GATHER``: copies its slice of every rank's ``in[h]`` to that rank's block of
       ``out``;
  4. stores ``e`` into its counter.

  Reuse: half ``h`` is written again two calls later, after this rank's next call passed
  barrier A, which needs every peer to have started that call, so every peer finished this
  one (kernels of a stream do not overlap). Sums run in rank order, so every rank gets the
  same bits.

Segments: ``n`` input elements form ``W`` segments of ``seg`` elements for two-shot and
reduce-scatter (``seg = ceil(n / W)``, exact for reduce-scatter), one segment otherwise. Each
segment is cut into ``P`` slices of whole ``BLOCK``s.
"""

from __future__ import annotations

import dataclasses

import torch
import triton
import triton.language as tl

from .. import language as dl

ALL_REDUCE = 0
TWO_SHOT = 1
REDUCE_SCATTER = 2
ALL_GATHER = 3
MODES = {"one_shot": ALL_REDUCE, "two_shot": TWO_SHOT, "reduce_scatter": REDUCE_SCATTER,
         "all_gather": ALL_GATHER}
# the same values as kernel constants (a kernel may only read constexpr globals)
_TWO_SHOT = tl.constexpr(TWO_SHOT)
_REDUCE_SCATTER = tl.constexpr(REDUCE_SCATTER)
_ALL_GATHER = tl.constexpr(ALL_GATHER)


@triton.jit
def fused_collective_kernel(x_ptr, out_ptr, buf_ptr, sig_ptr, epoch_ptr, n, seg, slice_len,
                            half_stride, red_offset, ctx, BLOCK: tl.constexpr,
                            MODE: tl.constexpr, WORLD: tl.constexpr):
    pid = tl.program_id(0)
    nprog = tl.num_programs(0)
    me = ctx.rank
    W = ctx.world_size
    epoch = tl.load(epoch_ptr + pid) + 1
    half = buf_ptr + (epoch % 2) * half_stride
    red = half + red_offset
    lo = pid * slice_len
    hi = tl.minimum(lo + slice_len, seg)
    segmented = (MODE == _TWO_SHOT) or (MODE == _REDUCE_SCATTER)
    n_seg = W if segmented else 1
    # 1. publish my slice of every segment
    s = 0
    while s < n_seg:
        for off in range(lo, hi, BLOCK):
            local = off + tl.arange(0, BLOCK)
            idx = s * seg + local
            mask = (idx < n) & (local < hi)
            tl.store(half + idx, tl.load(x_ptr + idx, mask=mask), mask=mask)
        s += 1
    _barrier(sig_ptr, pid, epoch, me, W, ctx)
    if MODE == _ALL_GATHER:
        for off in range(lo, hi, BLOCK):
            local = off + tl.arange(0, BLOCK)
            mask = local < hi
            for q in tl.static_range(WORLD):  # unrolled: the W remote loads overlap
                tl.store(out_ptr + q * n + local, dl.load(half + local, q, ctx, mask=mask),
                         mask=mask)
    else:
        # 2. reduce my slice of segment ``me`` (one-shot: of the whole input)
        start = me * seg if segmented else 0
        for off in range(lo, hi, BLOCK):
            local = off + tl.arange(0, BLOCK)
            idx = start + local
            mask = (idx < n) & (local < hi)
            acc = tl.zeros((BLOCK,), dtype=tl.float32)
            for q in tl.static_range(WORLD):  # unrolled: the W remote loads overlap
                acc += dl.load(half + idx, q, ctx, mask=mask, other=0.0).to(tl.float32)
            val = acc.to(out_ptr.dtype.element_ty)
            if MODE == _REDUCE_SCATTER:
                tl.store(out_ptr + local, val, mask=mask)
            else:
                tl.store(out_ptr + idx, val, mask=mask)
            if MODE == _TWO_SHOT:
                tl.store(red + local, val, mask=mask)
        if MODE == _TWO_SHOT:
            # 3. gather the other ranks' reduced slices
            _barrier(sig_ptr + nprog * W, pid, epoch, me, W, ctx)
            s = 0
            while s < W:
                if s != me:
                    for off in range(lo, hi, BLOCK):
                        local = off + tl.arange(0, BLOCK)
                        idx = s * seg + local
                        mask = (idx < n) & (local < hi)
                        tl.store(out_ptr + idx, dl.load(red + local, s, ctx, mask=mask),
                                 mask=mask)
                s += 1
    tl.store(epoch_ptr + pid, epoch)


@triton.jit
def _barrier(sig_ptr, pid, epoch, me, W, ctx):
    """Program ``pid`` of every rank meets: slot ``[pid][q]`` of rank ``r`` holds the epoch
    rank ``q``'s program ``pid`` reached."""
    row = sig_ptr + pid * W
    q = 0
    while q < W:
        if q != me:
            dl.notify(row + me, epoch, q, ctx)
        q += 1
    q = 0
    while q < W:
        if q != me:
            dl.wait(row + q, epoch, ctx)
        q += 1


@dataclasses.dataclass
class Workspace:
    """Buffers of one (mode, dtype, size bucket); see the module docstring."""

    buf: torch.Tensor  # symmetric [2, half_stride]
    pad: torch.Tensor  # symmetric int64 [2 * programs * W]
    epochs: torch.Tensor  # local int64 [programs]
    cap: int
    programs: int
    red_offset: int
    pad_key: str  # the signal pad's name (``runtime.signals.signal_pad``)

    def release(self, heap) -> None:
        """Free the heap buffers (collective; the caller drops the signal pad)."""
        heap.free(self.buf)


def workspace_shape(cap: int, world_size: int, mode: int) -> tuple[int, int]:
    """``(half_stride, red_offset)`` in elements for inputs of up to ``cap`` elements."""
    red = triton.cdiv(cap, world_size) if mode == TWO_SHOT else 0
    align = 64  # keep each region 128-byte aligned for 16-bit types
    red_offset = triton.cdiv(cap, align) * align
    return red_offset + triton.cdiv(red, align) * align, red_offset


def launch(x: torch.Tensor, out: torch.Tensor, ws: Workspace, mode: int, ctx, block: int,
           num_warps: int) -> None:
    """One fused collective on flat contiguous ``x`` (``numel <= ws.cap``) into ``out``:
    all-reduce: ``out[n]``; reduce-scatter: ``out[n / W]`` (``n`` divisible by ``W``);
    all-gather: ``out[W * n]`` in rank order."""
    n = x.numel()
    w = ctx.world_size
    seg = triton.cdiv(n, w) if mode in (TWO_SHOT, REDUCE_SCATTER) else n
    slice_len = triton.cdiv(triton.cdiv(seg, ws.programs), block) * block
    fused_collective_kernel[(ws.programs,)](
        x, out, ws.buf, ws.pad, ws.epochs, n, seg, slice_len, ws.buf.shape[1], ws.red_offset,
        ctx, BLOCK=block, MODE=mode, WORLD=w, num_warps=num_warps)


def bucket(n: int, max_cap: int) -> int:
    """The workspace capacity for ``n`` elements: the next power of two, at least 1024, at
    most ``max_cap``."""
    return min(max_cap, max(1024, 1 << (max(n, 1) - 1).bit_length()))


__all__ = ["ALL_GATHER", "ALL_REDUCE", "MODES", "REDUCE_SCATTER", "TWO_SHOT", "Workspace",
           "bucket", "fused_collective_kernel", "launch", "workspace_shape"]
