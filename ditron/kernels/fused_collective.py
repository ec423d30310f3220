"""Fused collectives: one kernel per call, epochs kept on the device (CUDA-graph safe).

All-reduce (one-shot, two-shot), reduce-scatter, all-gather and all-to-all (even splits)
among the ranks of one node, each a single launch. The host keeps no per-call state, so a
replayed CUDA graph runs the same launch again and stays correct. The kernel uses the
foundation's epoch protocol (signals only grow; ``wait`` for ``>= epoch``), with the epoch
counted on the device by each program:

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

     - ``ALL_REDUCE`` (one-shot): reduces (``OP``: sum, average, max or min) its slice over
       every rank's ``in[h]`` (rank order, in ``ACC``: fp32 for 16- and 32-bit floats, else
       the input's type) into ``out``;
     - ``REDUCE_SCATTER``: the same for its slice of segment ``r``, into ``out`` (one segment);
     - ``TWO_SHOT``: as reduce-scatter, also into its own ``red[h]``; barrier B (slot set B);
       then copies its slice of every other segment ``s`` from rank ``s``'s ``red[h]``;
     - ``ALL_GATHER``: copies its slice of every rank's ``in[h]`` to that rank's block of
       ``out``;
     - ``ALL_TO_ALL``: copies its slice of segment ``r`` of every rank ``q``'s ``in[h]`` to
       block ``q`` of ``out`` (the reduce-scatter's movement without the sum);
  4. stores ``e`` into its counter.

  Reuse: half ``h`` is written again two calls later, after this rank's next call passed
  barrier A, which needs every peer to have started that call, so every peer finished this
  one (kernels of a stream do not overlap). Sums run in rank order, so every rank gets the
  same bits.

Two variants, one protocol (``PUSH``, fixed per workspace): *pull* (above) publishes into
the rank's own buffer and reads the peers' remotely after the barrier; *push* stores each
slice straight into slot ``r`` of the ranks that read it (all ranks, or rank ``s`` for
segment ``s``; the reduced two-shot segment to every rank's ``red`` slot ``r``) and reads
only local memory after the barrier. Remote stores need no round trip, so push keeps more
bytes in flight on large inputs; its buffers hold ``W`` slots per half instead of one.

Segments: ``n`` input elements form ``W`` segments of ``seg`` elements for two-shot,
reduce-scatter and all-to-all (``seg = ceil(n / W)``, exact for the latter two), one segment
otherwise. Each
segment is cut into ``P`` slices of whole ``BLOCK``s. Inputs larger than a workspace run as
pieces (:func:`launch`'s ``stride``): contiguous pieces for all-reduce and all-gather, the
same columns of every segment for reduce-scatter and all-to-all. Offsets into ``x`` and
``out`` are int64 (``WIDE``) when either spans more than 2**31 elements
(``offsets.wide``): segment or rank block ``s`` starts ``s * stride`` in.
"""

from __future__ import annotations

import dataclasses

import torch
import triton
import triton.language as tl

from .. import language as dl
from ..runtime.dtypes import tl_accumulator
from ..runtime.grid_math import cdiv
from ..runtime.triton_launch import FastKernel
from .offsets import wide

ALL_REDUCE = 0
TWO_SHOT = 1
REDUCE_SCATTER = 2
ALL_GATHER = 3
ALL_TO_ALL = 4
MODES = {"one_shot": ALL_REDUCE, "two_shot": TWO_SHOT, "reduce_scatter": REDUCE_SCATTER,
         "all_gather": ALL_GATHER, "all_to_all": ALL_TO_ALL}
#: modes whose input is ``W`` segments, segment ``s`` meant for rank ``s``
SEGMENTED = (TWO_SHOT, REDUCE_SCATTER, ALL_TO_ALL)
# the same values as kernel constants (a kernel may only read constexpr globals)
_TWO_SHOT = tl.constexpr(TWO_SHOT)
_REDUCE_SCATTER = tl.constexpr(REDUCE_SCATTER)
_ALL_GATHER = tl.constexpr(ALL_GATHER)
_ALL_TO_ALL = tl.constexpr(ALL_TO_ALL)
#: the reductions (``OP``), by their ``runtime.dtypes.OPS`` names
REDUCTIONS = {"sum": 0, "avg": 1, "max": 2, "min": 3}
_SUM = tl.constexpr(0)
_AVG = tl.constexpr(1)
_MAX = tl.constexpr(2)


@triton.jit
def fused_collective_kernel(x_ptr, out_ptr, buf_ptr, sig_ptr, epoch_ptr, n, seg, stride,
                            slice_len, half_stride, red_offset, slot_len, ctx,
                            BLOCK: tl.constexpr, MODE: tl.constexpr, WORLD: tl.constexpr,
                            PUSH: tl.constexpr, ACC: tl.constexpr, OP: tl.constexpr,
                            WIDE: tl.constexpr = False):
    if WIDE:  # ``x`` or ``out`` spans more than 2**31 elements: ``s * stride`` in int64
        stride = tl.cast(stride, tl.int64)
    pid = tl.program_id(0)
    nprog = tl.num_programs(0)
    me = ctx.rank
    W = ctx.world_size
    epoch = tl.load(epoch_ptr + pid) + 1
    half = buf_ptr + (epoch % 2) * half_stride
    red = half + red_offset
    lo = pid * slice_len
    hi = tl.minimum(lo + slice_len, seg)
    segmented = (MODE == _TWO_SHOT) or (MODE == _REDUCE_SCATTER) or (MODE == _ALL_TO_ALL)
    n_seg = W if segmented else 1
    # 1. publish my slice of every segment: pull: into my own buffer; push: into slot ``me``
    #    of the ranks that read it (segmented: rank ``s`` for segment ``s``; else all)
    s = 0
    while s < n_seg:
        for off in range(lo, hi, BLOCK):
            local = off + tl.arange(0, BLOCK)
            idx = s * seg + local  # in the buffer
            xi = s * stride + local  # in the input
            mask = (xi < n) & (local < hi)
            v = tl.load(x_ptr + xi, mask=mask)
            if PUSH:
                if segmented:
                    dl.store(half + me * slot_len + local, v, s, ctx, mask=mask)
                else:
                    for q in tl.static_range(WORLD):  # unrolled: the W stores overlap
                        dl.store(half + me * slot_len + local, v, q, ctx, mask=mask)
            else:
                tl.store(half + idx, v, mask=mask)
        s += 1
    _barrier(sig_ptr, pid, epoch, me, W, ctx)
    if (MODE == _ALL_GATHER) or (MODE == _ALL_TO_ALL):
        # block ``q`` of ``out``: rank ``q``'s slice (all-gather) or segment ``me`` of rank
        # ``q``'s input (all-to-all); pull reads it where rank ``q`` published it
        pull_base = 0
        if MODE == _ALL_TO_ALL:
            pull_base = me * seg
        for off in range(lo, hi, BLOCK):
            local = off + tl.arange(0, BLOCK)
            mask = local < hi
            for q in tl.static_range(WORLD):  # unrolled: the W loads overlap
                if PUSH:
                    v = tl.load(half + q * slot_len + local, mask=mask)
                else:
                    v = dl.load(half + pull_base + local, q, ctx, mask=mask)
                tl.store(out_ptr + q * stride + local, v, mask=mask)
    else:
        # 2. reduce my slice of segment ``me`` (one-shot: of the whole input)
        mine = me if segmented else 0
        start = mine * seg
        x_start = mine * stride
        for off in range(lo, hi, BLOCK):
            local = off + tl.arange(0, BLOCK)
            idx = start + local
            xi = x_start + local
            mask = (xi < n) & (local < hi)
            acc = tl.zeros((BLOCK,), dtype=ACC)
            for q in tl.static_range(WORLD):  # unrolled: the W loads overlap
                if PUSH:
                    v = tl.load(half + q * slot_len + local, mask=mask, other=0)
                else:
                    v = dl.load(half + idx, q, ctx, mask=mask, other=0)
                if q == 0:
                    acc = v.to(ACC)
                elif (OP == _SUM) or (OP == _AVG):
                    acc += v.to(ACC)
                elif OP == _MAX:
                    acc = tl.maximum(acc, v.to(ACC), propagate_nan=tl.PropagateNan.ALL)
                else:
                    acc = tl.minimum(acc, v.to(ACC), propagate_nan=tl.PropagateNan.ALL)
            if OP == _AVG:
                acc = acc / WORLD
            val = acc.to(out_ptr.dtype.element_ty)
            if MODE == _REDUCE_SCATTER:
                tl.store(out_ptr + local, val, mask=mask)
            else:
                tl.store(out_ptr + xi, val, mask=mask)
            if MODE == _TWO_SHOT:
                if PUSH:
                    for q in tl.static_range(WORLD):
                        dl.store(red + me * slot_len + local, val, q, ctx, mask=mask)
                else:
                    tl.store(red + local, val, mask=mask)
        if MODE == _TWO_SHOT:
            # 3. gather the other ranks' reduced slices
            _barrier(sig_ptr + nprog * W, pid, epoch, me, W, ctx)
            s = 0
            while s < W:
                if s != me:
                    for off in range(lo, hi, BLOCK):
                        local = off + tl.arange(0, BLOCK)
                        xi = s * stride + local
                        mask = (xi < n) & (local < hi)
                        if PUSH:
                            v = tl.load(red + s * slot_len + local, mask=mask)
                        else:
                            v = dl.load(red + local, s, ctx, mask=mask)
                        tl.store(out_ptr + xi, v, mask=mask)
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
    """Buffers of one (mode, variant, dtype, size bucket); see the module docstring."""

    buf: torch.Tensor  # symmetric [2, half_stride]
    pad: torch.Tensor  # symmetric int64 [2 * programs * W]
    epochs: torch.Tensor  # local int64 [programs]
    cap: int
    programs: int
    red_offset: int
    pad_key: str  # the signal pad's name (``runtime.signals.signal_pad``)
    push: bool = False
    slot_len: int = 0

    def release(self, heap) -> None:
        """Free the heap buffers (collective; the caller drops the signal pad)."""
        heap.free(self.buf)


def workspace_shape(cap: int, world_size: int, mode: int,
                    push: bool = False) -> tuple[int, int, int]:
    """``(half_stride, red_offset, slot_len)`` in elements for inputs of up to ``cap``
    elements (``slot_len``: one rank's slot in the push layout, 0 for pull)."""
    align = 64  # keep each region 128-byte aligned for 16-bit types
    up = lambda v: cdiv(v, align) * align  # noqa: E731
    segmented = mode in SEGMENTED
    if not push:
        red = cdiv(cap, world_size) if mode == TWO_SHOT else 0
        return up(cap) + up(red), up(cap), 0
    slot = up(cdiv(cap, world_size)) if segmented else up(cap)
    slots = world_size * slot
    red = slots if mode == TWO_SHOT else 0
    return slots + red, slots, slot


def launch(x: torch.Tensor, out: torch.Tensor, ws: Workspace, mode: int, ctx, block: int,
           num_warps: int, *, n: int | None = None, seg: int | None = None,
           stride: int | None = None, op: str = "sum") -> None:
    """One fused collective on flat contiguous ``x`` into ``out``: all-reduce:
    ``out[n]``; reduce-scatter: ``out[n / W]`` (``n`` divisible by ``W``); all-gather:
    ``out[W * n]`` in rank order; all-to-all: ``out[n]``, block ``q`` (``n / W`` elements)
    from rank ``q``. The input must fit the workspace (``W * seg <= ws.cap`` for
    reduce-scatter and all-to-all, ``n <= ws.cap`` otherwise).

    Pieces of a larger op: ``stride`` is the distance between the ``W`` segments of ``x``
    (reduce-scatter, two-shot, all-to-all; for all-to-all also between the blocks of ``out``)
    or between the rank blocks of ``out`` (all-gather), ``seg`` the
    segment length of this piece and ``n`` the bound on input indices (default: ``x``'s).
    ``op``: the reduction of the reducing modes (a key of :data:`REDUCTIONS`)."""
    n = x.numel() if n is None else n
    w = ctx.world_size
    if seg is None:
        seg = cdiv(n, w) if mode in SEGMENTED else n
    stride = seg if stride is None else stride
    slice_len = cdiv(cdiv(seg, ws.programs), block) * block
    _FUSED[(ws.programs,)](
        x, out, ws.buf, ws.pad, ws.epochs, n, seg, stride, slice_len, ws.buf.shape[1],
        ws.red_offset, ws.slot_len, ctx, BLOCK=block, MODE=mode, WORLD=w, PUSH=ws.push,
        ACC=tl_accumulator(x.dtype), OP=REDUCTIONS[op], WIDE=wide(x, out),
        num_warps=num_warps)


_FUSED = FastKernel(fused_collective_kernel)


def bucket(n: int, max_cap: int) -> int:
    """The workspace capacity for ``n`` elements: the next power of two, at least 1024, at
    most ``max_cap``."""
    return min(max_cap, max(1024, 1 << (max(n, 1) - 1).bit_length()))


__all__ = ["ALL_GATHER", "ALL_REDUCE", "ALL_TO_ALL", "MODES", "REDUCE_SCATTER", "REDUCTIONS",
           "SEGMENTED", "TWO_SHOT", "Workspace", "bucket", "fused_collective_kernel",
           "launch", "workspace_shape"]
