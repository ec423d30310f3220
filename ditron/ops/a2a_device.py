"""Device-level all-to-all: split sizes live in a device tensor computed at run time (MoE).

No host synchronisation: the split sizes are exchanged by a kernel, every rank derives its
offsets on the device, and the data moves with remote stores (the SM engine's way). The
output has a fixed capacity of ``max_out_rows`` rows; the true counts come back as a device
tensor. Same epoch/ack protocol as ``exchange.py`` (two halves, ack after reading).
"""

from __future__ import annotations

import math

import torch
import triton
import triton.language as tl

from .. import language as dl
from ..engines.sync import notify_peers, wait_slots
from ..runtime.signals import signal_pad
from ..runtime.world import current


@triton.jit
def _splits_kernel(splits, mat, pad, epoch, first, count, ctx, WB: tl.constexpr):
    me = ctx.rank
    w = ctx.world_size
    offs = tl.arange(0, WB)
    if epoch > 2:
        for i in range(0, count):
            if first + i != me:
                dl.wait(pad + 2 * w + first + i, epoch - 2, ctx)
    mine = tl.load(splits + offs, mask=offs < w, other=0)
    for i in range(0, count):
        dl.store(mat + me * w + offs, mine, first + i, ctx, mask=offs < w)
        dl.notify(pad + me, epoch, first + i, ctx)
    for i in range(0, count):
        dl.wait(pad + first + i, epoch, ctx)


@triton.jit
def _data_kernel(x, x_rows, inbox, mat, pad, epoch, row, cap_rows, ctx, BLOCK: tl.constexpr,
                 WB: tl.constexpr):
    q = tl.program_id(0)
    me = ctx.rank
    w = ctx.world_size
    offs = tl.arange(0, WB)
    col = tl.load(mat + offs * w + q, mask=offs < w, other=0)
    dst_rows = tl.sum(tl.where(offs < me, col, 0))
    line = tl.load(mat + me * w + offs, mask=offs < w, other=0)
    src_rows = tl.sum(tl.where(offs < q, line, 0))
    rows = tl.sum(tl.where(offs == q, line, 0))
    rows = tl.minimum(rows, tl.maximum(cap_rows - dst_rows, 0))
    rows = tl.minimum(rows, tl.maximum(x_rows - src_rows, 0))
    dl.put(inbox + dst_rows * row, x + src_rows * row, rows * row, q, ctx, BLOCK)
    dl.notify(pad + w + me, epoch, q, ctx)


def _workspace(dtype: torch.dtype, row: int, cap_rows: int):
    rt = current()
    w = rt.world.world_size
    key = ("all_to_all_device", dtype, row, cap_rows)
    ws = rt.cache.get(key)
    if ws is None:
        mat = rt.heap.alloc((2, w, w), torch.int64, name="a2a_device:splits")
        inbox = rt.heap.alloc((2, max(cap_rows * row, 1)), dtype, name="a2a_device:inbox")
        ws = rt.cache[key] = (mat, inbox)
        from ..runtime.barrier import barrier

        barrier()  # every rank has initialised its workspace before a peer writes into it
    return ws


def all_to_all_device(x: torch.Tensor, splits: torch.Tensor,
                      max_out_rows: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Send rows ``splits[q]`` of ``x`` (dim 0, in order) to rank ``q``; ``splits`` is an
    integer device tensor ``[W]`` that may be computed on the device (no host sync).

    Returns ``(out, out_splits)``: ``out`` has ``max_out_rows`` rows, the first
    ``out_splits.sum()`` holding the rows received from ranks ``0..W-1`` in order (the rest
    is undefined); rows beyond the capacity are dropped (compare ``out_splits.sum()`` with
    ``max_out_rows``). Equivalent, with host splits, to ``dist.all_to_all_single``. Every
    rank must pass the same ``max_out_rows`` and row shape. Ranks must share a node.
    """
    rt = current()
    w, me = rt.world.world_size, rt.world.rank
    if rt.topo.num_nodes > 1:
        raise NotImplementedError("all_to_all_device: ranks on several nodes are not "
                                  "supported yet; use ditron.ops.all_to_all")
    if x.device != rt.world.device or splits.device != rt.world.device:
        raise ValueError(f"all_to_all_device: x and splits must be on {rt.world.device}")
    if x.dim() == 0 or splits.shape != (w,) or splits.dtype.is_floating_point:
        raise ValueError(f"all_to_all_device: need x with >= 1 dim and integer splits [{w}], "
                         f"got x {tuple(x.shape)}, splits {tuple(splits.shape)} {splits.dtype}")
    if max_out_rows < 0:
        raise ValueError(f"all_to_all_device: max_out_rows must be >= 0, got {max_out_rows}")
    row = math.prod(x.shape[1:])
    from .collectives import _agree, _check_tensor

    _check_tensor("all_to_all_device", x)
    _agree("all_to_all_device", (tuple(x.shape[1:]), str(x.dtype), int(max_out_rows)))
    mat, inbox = _workspace(x.dtype, row, max_out_rows)
    pad = signal_pad("all_to_all_device", 3 * w)
    epoch = pad.next_epoch()
    half = epoch % 2
    ctx = rt.context()
    wb = triton.next_power_of_2(w)
    node = rt.topo.node_ranks()
    xc = x.contiguous()
    _splits_kernel[(1,)](splits.to(torch.int64).contiguous(), mat[half], pad.signals, epoch,
                         node.start, len(node), ctx, WB=wb)
    block = 4096 if rt.world.backend == "cpu" else 2048
    _data_kernel[(w,)](xc, x.shape[0], inbox[half], mat[half], pad.signals, epoch, row,
                       max_out_rows, ctx, BLOCK=block, WB=wb)
    wait_slots(pad, w, node, epoch)
    out_splits = mat[half][:, me].clone()
    out = inbox[half][: max_out_rows * row].view(max_out_rows, *x.shape[1:]).clone()
    notify_peers(pad, 2 * w + me, epoch, node, skip=me)
    if rt.wait_timeout > 0 or rt.world.backend == "cpu":
        from ..runtime.diagnostics import check_waits

        check_waits()
    return out, out_splits
