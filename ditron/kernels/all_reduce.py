"""Fused all-reduce: one kernel per call, epochs kept on the device (CUDA-graph safe).

The host keeps no per-call state: a replayed CUDA graph runs the same launch again and stays
correct. The kernel uses the foundation's epoch protocol (signals only grow; ``wait`` for
``>= epoch``), with the epoch counted on the device by each program:

* Workspace (per dtype, method and size bucket; :func:`workspace`): a symmetric buffer with
  two halves (``epoch % 2``), each holding a copy of the input (``cap`` elements) and, for
  two-shot, a reduced segment (``ceil(cap / W)``); a symmetric signal pad of ``2 * P * W``
  slots (slot sets A and B, one row of ``W`` per program); a local int64 epoch counter per
  program. ``P`` is fixed per workspace, so all counters of all ranks advance together.
* Program ``p`` of rank ``r``, call with epoch ``e`` (its counter + 1), half ``h = e % 2``:

  1. copies its slice of the input into ``in[h]`` (segment-wise slices, see below);
  2. barrier A: sets slot ``A[p][r]`` of every peer to ``e`` (release, system scope), waits
     until its own ``A[p][q] >= e`` for every peer ``q`` (acquire); peers' program ``p``
     have then published the same slice;
  3. one-shot: sums its slice over every rank's ``in[h]`` in rank order (fp32) into ``out``.
     Two-shot: sums its slice of segment ``r`` over every rank into ``out`` and into its own
     ``red[h]``; barrier B (same as A on slot set B); copies its slice of every other
     segment ``s`` from rank ``s``'s ``red[h]`` into ``out``;
  4. stores ``e`` into its counter.

  Reuse: half ``h`` is written again two calls later, after this rank's next call passed
  barrier A, which needs every peer to have started that call, so every peer finished this
  one (kernels of a stream do not overlap). Sums run in rank order, so every rank gets the
  same bits.

Segments: two-shot splits the ``n`` elements into ``W`` segments of ``ceil(n / W)``; one-shot
uses one segment. Each segment is split into ``P`` slices of whole ``BLOCK``s.
"""

from __future__ import annotations

import dataclasses

import torch
import triton
import triton.language as tl

from .. import language as dl


@triton.jit
def all_reduce_kernel(x_ptr, out_ptr, buf_ptr, sig_ptr, epoch_ptr, n, seg, slice_len,
                      half_stride, red_offset, ctx, BLOCK: tl.constexpr,
                      TWO_SHOT: tl.constexpr):
    pid = tl.program_id(0)
    nprog = tl.num_programs(0)
    me = ctx.rank
    W = ctx.world_size
    epoch = tl.load(epoch_ptr + pid) + 1
    half = buf_ptr + (epoch % 2) * half_stride
    red = half + red_offset
    lo = pid * slice_len
    hi = tl.minimum(lo + slice_len, seg)
    n_seg = W if TWO_SHOT else 1
    # 1. publish my slice of every segment
    s = 0
    while s < n_seg:
        start = s * seg
        for off in range(lo, hi, BLOCK):
            idx = start + off + tl.arange(0, BLOCK)
            mask = (idx < n) & (off + tl.arange(0, BLOCK) < hi)
            tl.store(half + idx, tl.load(x_ptr + idx, mask=mask), mask=mask)
        s += 1
    _barrier(sig_ptr, pid, epoch, me, W, ctx)
    # 2. reduce my slice of segment ``me`` (one-shot: of the whole input)
    start = me * seg if TWO_SHOT else 0
    for off in range(lo, hi, BLOCK):
        idx = start + off + tl.arange(0, BLOCK)
        mask = (idx < n) & (off + tl.arange(0, BLOCK) < hi)
        acc = tl.zeros((BLOCK,), dtype=tl.float32)
        q = 0
        while q < W:
            acc += dl.load(half + idx, q, ctx, mask=mask, other=0.0).to(tl.float32)
            q += 1
        val = acc.to(out_ptr.dtype.element_ty)
        tl.store(out_ptr + idx, val, mask=mask)
        if TWO_SHOT:
            tl.store(red + off + tl.arange(0, BLOCK), val, mask=mask)
    if TWO_SHOT:
        # 3. gather the other ranks' reduced slices
        _barrier(sig_ptr + nprog * W, pid, epoch, me, W, ctx)
        s = 0
        while s < W:
            if s != me:
                start = s * seg
                for off in range(lo, hi, BLOCK):
                    local = off + tl.arange(0, BLOCK)
                    idx = start + local
                    mask = (idx < n) & (local < hi)
                    tl.store(out_ptr + idx, dl.load(red + local, s, ctx, mask=mask), mask=mask)
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
    """Buffers of one (dtype, method, size bucket); see the module docstring."""

    buf: torch.Tensor  # symmetric [2, half_stride]
    pad: torch.Tensor  # symmetric int64 [2 * programs * W]
    epochs: torch.Tensor  # local int64 [programs]
    cap: int
    programs: int
    red_offset: int


def workspace_shape(cap: int, world_size: int, two_shot: bool) -> tuple[int, int]:
    """``(half_stride, red_offset)`` in elements for inputs of up to ``cap`` elements."""
    red = -(-cap // world_size) if two_shot else 0
    align = 64  # keep each region 128-byte aligned for 16-bit types
    red_offset = -(-cap // align) * align
    return red_offset + -(-red // align) * align, red_offset


def launch(x: torch.Tensor, out: torch.Tensor, ws: Workspace, two_shot: bool, ctx,
           block: int, num_warps: int) -> None:
    """``out = sum over ranks of x`` (flat, contiguous, ``numel <= ws.cap``)."""
    n = x.numel()
    w = ctx.world_size
    seg = triton.cdiv(n, w) if two_shot else n
    slice_len = triton.cdiv(triton.cdiv(seg, ws.programs), block) * block
    all_reduce_kernel[(ws.programs,)](
        x, out, ws.buf, ws.pad, ws.epochs, n, seg, slice_len, ws.buf.shape[1], ws.red_offset,
        ctx, BLOCK=block, TWO_SHOT=two_shot, num_warps=num_warps)


def bucket(n: int, max_cap: int) -> int:
    """The workspace capacity for ``n`` elements: the next power of two, at least 1024, at
    most ``max_cap`` (larger inputs are reduced in pieces of ``max_cap``)."""
    return min(max_cap, max(1024, 1 << (max(n, 1) - 1).bit_length()))


__all__ = ["Workspace", "all_reduce_kernel", "bucket", "launch", "workspace_shape"]
