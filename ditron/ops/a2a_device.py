"""Device-level all-to-all: split sizes live in a device tensor computed at run time (MoE).

No host synchronisation and no host state per call: the split sizes are exchanged by a
kernel, every rank derives its offsets on the device, the data moves with remote stores (the
SM engine's way), and the call's epoch is counted on the device, so the op can be captured in
a CUDA graph and replayed. The output has a fixed capacity of ``max_out_rows`` rows; the true
counts come back as a device tensor.

Protocol (four stream-ordered launches; ``e`` = the workspace's device epoch, ``h = e % 2``):

1. ``_splits_kernel`` (one program) bumps the epoch to ``e``; once every peer acked call
   ``e - 2`` (slot ``ack[q] >= e - 2``: they finished reading half ``h``), writes its split
   row (the rows it really sends: negative sizes as 0, cut to its send rows) into every
   peer's split matrix ``mat[h]`` and raises ``splits[me]`` there; waits for every peer's
   row;
2. ``_data_kernel`` (``P`` programs per destination ``q``, each a share of the rows)
   stores its rows for ``q != me`` at the offset the matrix gives into ``q``'s
   ``inbox[h]``; each program adds 1 to ``data[me]`` there (a counter: ``e * P`` once call
   ``e`` is complete);
3. ``_finish_kernel`` waits until every peer's ``data`` slot reaches ``e * P`` and copies
   the rows that came (up to the capacity) out: the peers' from ``inbox[h]``, my own
   straight from ``x`` (one pass over them, not two), and this rank's column of
   ``mat[h]``; for :func:`all_to_all_inbox` one program only waits and writes the column
   and where half ``h`` starts, and the caller's kernels read the rows in place;
4. ``_ack_kernel`` raises ``ack[me]`` on every peer (:meth:`Inbox.close` for the inbox).

:func:`exchange_counts` (MoE routing counts: a small integer row per peer) runs the same
protocol in one launch, ``_exchange_kernel``: steps 1, 3 (the rows are the data) and 4.

A world over several nodes takes the forms of ``a2a_nodes.py`` instead (split sizes read on
the host, rows through :func:`ditron.ops.all_to_all`).
"""

from __future__ import annotations

import dataclasses
import math

import torch
import triton
import triton.language as tl

from .. import language as dl
from ..engines.sync import notify_range, wait_range
from ..runtime.agreement import agree, checking_data, raise_together, refused_together
from ..runtime.dtypes import moved_as, viewed
from ..runtime.grid_math import cdiv, next_power_of_2
from ..runtime.integers import check_int
from ..runtime.signals import signal_pad
from ..runtime.triton_launch import FastKernel
from ..runtime.world import Runtime, current, is_initialized, use
from . import a2a_nodes
from .fused_launch import sm_count
from .graphs import capturing
from .modes import public_op
from .workspaces import alloc_buffers, cached, follow_previous_use

#: programs per destination in ``_data_kernel`` on a GPU: ``GPU_SENDERS // W``, at least
#: ``MIN_SENDERS`` (a function of the world size only: every rank must count the same, as the
#: "data ready" counters' targets depend on it)
GPU_SENDERS = 256
MIN_SENDERS = 16
SENDERS_CPU = 2
#: the rows' copy tiles (``_move_rows``): bytes a tile moves, and at most this many
#: elements of a row per tile (a tile takes several rows of a short row), by backend
TILE_BYTES = {"cuda": 16384, "cpu": 16384}
TILE_COLS = {"cuda": 1024, "cpu": 4096}
#: the most elements a copy tile holds (its addresses and masks take registers): on sm_90a
#: (ptxas, session 58) tiles of 8192 bf16 elements spilled 32-476 B per thread where the
#: rows are narrower than ``WIDE_COLS`` elements (8 to 128, aligned or not), none where
#: they are wider (200 to 7168; 4 B with 1024 and a 64-float companion row); 4096-element
#: tiles of the narrow rows spill none, and took 0.94-1.01x the time of 8192-element ones on
#: an H200 (65536 bf16 rows of 8-128 elements, plain and indexed; rows of 256, unchanged,
#: 1.00x; docs/perf.md, session 60)
TILE_ELEMENTS = 8192
NARROW_TILE_ELEMENTS = 4096
WIDE_COLS = 256
#: programs per SM of the finishing copy (8: 512 us for 65536 rows of 7168 bf16 on an H200,
#: 700 with 2; 12 and 16 no better, session 48), and warps of both copy kernels (GPU)
FINISH_PER_SM = 8
COPY_WARPS = 4


@triton.jit
def _open_epoch(epoch_ptr, pad, ack_base, first, count, ctx):
    """Bump the device epoch to ``e`` and return it once every peer has acked call
    ``e - 2`` (slots ``ack_base + r``): it is done reading half ``e % 2`` of my writes."""
    epoch = tl.load(epoch_ptr) + 1
    tl.store(epoch_ptr, epoch)
    if epoch > 2:
        wait_range(pad, ack_base, first, count, ctx.rank, epoch - 2, ctx)
    return epoch


@triton.jit
def _splits_kernel(splits, x_rows, mat, pad, epoch_ptr, first, count, ctx, WB: tl.constexpr):
    me = ctx.rank
    w = ctx.world_size
    epoch = _open_epoch(epoch_ptr, pad, 2 * w, first, count, ctx)
    mat_h = mat + (epoch % 2) * w * w
    offs = tl.arange(0, WB)
    # the rows actually sent: a negative split sends none, splits past my x_rows send rows
    # are cut to those left (every offset derived from the matrix stays inside the buffers);
    # each split is first cut to x_rows, so that the running sum cannot overflow
    mine = tl.minimum(tl.maximum(tl.load(splits + offs, mask=offs < w, other=0), 0), x_rows)
    end = tl.cumsum(mine, axis=0)
    mine = tl.minimum(end, x_rows) - tl.minimum(end - mine, x_rows)
    for i in range(0, count):
        dl.store(mat_h + me * w + offs, mine, first + i, ctx, mask=offs < w)
        dl.notify(pad + me, epoch, first + i, ctx)
    wait_range(pad, 0, first, count, -1, epoch, ctx)


@triton.jit
def _copy_tile(item, col_tiles, R: tl.constexpr, BC: tl.constexpr):
    """Work item ``item`` of a row copy: its ``R`` row numbers and ``BC`` column numbers
    (items run along a block of rows first, ``col_tiles`` of them a block)."""
    return ((item // col_tiles) * R + tl.arange(0, R),
            (item % col_tiles) * BC + tl.arange(0, BC))


@triton.jit
def _scaled(v, scale, i, ok, SCALED: tl.constexpr):
    """Rows ``v`` times ``scale[i]`` (in fp32, rounded once to ``v``'s type) if ``SCALED``."""
    if SCALED:
        f = tl.load(scale + i, mask=ok, other=0.0).to(tl.float32)
        v = (v.to(tl.float32) * f[:, None]).to(v.dtype)
    return v


@triton.jit
def _move_rows(dst, dst_first, src, src_first, src_rows, index, scale, rows, row, peer, ctx,
               R: tl.constexpr, BC: tl.constexpr, INDEXED: tl.constexpr,
               SCALED: tl.constexpr):
    """This program's share of ``dst[dst_first + i] = src[s]`` for ``i < rows``, ``s =
    index[i]`` (``INDEXED``; rows with ``s`` outside ``[0, src_rows)`` are skipped) or
    ``src_first + i``, times ``scale[i]`` if ``SCALED``; rows of ``row`` elements, ``dst``
    in ``peer``'s heap. Work items are tiles of ``R`` rows by ``BC`` elements dealt
    round-robin over the programs of axis 0: many bytes in flight per program, whatever
    the row length."""
    col_tiles = tl.cdiv(row, BC)
    for item in range(tl.program_id(0), tl.cdiv(rows, R) * col_tiles, tl.num_programs(0)):
        i, cols = _copy_tile(item, col_tiles, R, BC)
        ok = i < rows
        if INDEXED:
            s = tl.load(index + i, mask=ok, other=-1)
            ok = ok & (s >= 0) & (s < src_rows)
        else:
            s = src_first + i
        mask = ok[:, None] & (cols < row)[None, :]
        v = tl.load(src + s.to(tl.int64)[:, None] * row + cols[None, :], mask=mask)
        v = _scaled(v, scale, i, ok, SCALED)
        dl.store(dst + (dst_first + i).to(tl.int64)[:, None] * row + cols[None, :], v, peer,
                 ctx, mask=mask)


@triton.jit
def _collect_rows(out, inbox, x, send_index, send_scale, recv_index, rows, came, own_lo, own_n,
                  own_src, x_len, row, R: tl.constexpr, BC: tl.constexpr,
                  RECV_INDEXED: tl.constexpr, SEND_INDEXED: tl.constexpr,
                  SCALED: tl.constexpr, ZERO: tl.constexpr):
    """This program's share of ``out[r] = received row j`` for ``r < rows``, ``j =
    recv_index[r]`` (``RECV_INDEXED``) or ``r``, where ``j < came``: rows
    ``own_lo .. own_lo + own_n - 1`` are this rank's own send rows ``own_src ..``, read
    from ``x`` (through ``send_index`` with ``SEND_INDEXED``, times ``send_scale`` with
    ``SCALED``) in place of the inbox, which they never entered; with ``ZERO`` the other
    rows ``r < rows`` are written zero; tiles as in :func:`_move_rows`."""
    col_tiles = tl.cdiv(row, BC)
    for item in range(tl.program_id(0), tl.cdiv(rows, R) * col_tiles, tl.num_programs(0)):
        r, cols = _copy_tile(item, col_tiles, R, BC)
        in_rows = r < rows
        ok = in_rows
        if RECV_INDEXED:
            j = tl.load(recv_index + r, mask=ok, other=-1)
        else:
            j = r
        ok = ok & (j >= 0) & (j < came)
        own = ok & (j >= own_lo) & (j < own_lo + own_n)
        if SEND_INDEXED:
            s = tl.load(send_index + own_src + j - own_lo, mask=own, other=-1)
            own = own & (s >= 0) & (s < x_len)
        else:
            s = own_src + j - own_lo
        ok = ok & ((j < own_lo) | (j >= own_lo + own_n) | own)
        in_cols = (cols < row)[None, :]
        v = tl.load(inbox + j.to(tl.int64)[:, None] * row + cols[None, :],
                    mask=(ok & ~own)[:, None] & in_cols)
        mine = tl.load(x + s.to(tl.int64)[:, None] * row + cols[None, :],
                       mask=own[:, None] & in_cols)
        mine = _scaled(mine, send_scale, own_src + j - own_lo, own, SCALED)
        v = tl.where(own[:, None], mine, v)
        if ZERO:
            v = tl.where(ok[:, None], v, 0)
            ok = in_rows
        tl.store(out + r.to(tl.int64)[:, None] * row + cols[None, :], v,
                 mask=ok[:, None] & in_cols)


@triton.jit
def _placement(mat_h, me, q, x_rows, cap_rows, w, WB: tl.constexpr):
    """Where my rows for rank ``q`` go: ``(dst_first, src_first, rows)``, the first row of
    ``q``'s inbox they take, the first of my send rows, and how many (cut to ``q``'s
    capacity and to my ``x_rows`` send rows)."""
    offs = tl.arange(0, WB)
    col = tl.load(mat_h + offs * w + q, mask=offs < w, other=0)
    dst_first = tl.sum(tl.where(offs < me, col, 0))
    line = tl.load(mat_h + me * w + offs, mask=offs < w, other=0)
    src_first = tl.sum(tl.where(offs < q, line, 0))
    rows = tl.sum(tl.where(offs == q, line, 0))
    rows = tl.minimum(rows, tl.maximum(cap_rows - dst_first, 0))
    rows = tl.minimum(rows, tl.maximum(x_rows - src_first, 0))
    return dst_first, src_first, rows


@triton.jit
def _data_kernel(x, x_rows, x_len, index, scale, inbox, inbox_stride, mat, pad, epoch_ptr, row,
                 cap_rows, extra, extra_inbox, extra_stride, extra_row, ctx, R: tl.constexpr,
                 BC: tl.constexpr, WB: tl.constexpr, INDEXED: tl.constexpr,
                 SCALED: tl.constexpr, EXTRA: tl.constexpr = False, R2: tl.constexpr = 1,
                 BC2: tl.constexpr = 1):
    q = tl.program_id(1)
    me = ctx.rank
    w = ctx.world_size
    epoch = tl.load(epoch_ptr)
    mat_h = mat + (epoch % 2) * w * w
    inbox_h = inbox + (epoch % 2) * inbox_stride
    dst_first, src_first, rows = _placement(mat_h, me, q, x_rows, cap_rows, w, WB)
    if q != me:  # my rows for myself skip the inbox: _finish_kernel reads them from x
        if INDEXED:  # send row i is x[index[i]]
            _move_rows(inbox_h, dst_first, x, 0, x_len, index + src_first,
                       scale + src_first, rows, row, q, ctx, R, BC, True, SCALED)
        else:
            _move_rows(inbox_h, dst_first, x, src_first, x_len, index, scale + src_first,
                       rows, row, q, ctx, R, BC, False, SCALED)
        if EXTRA:  # the companion rows, along the same routes, unscaled
            extra_h = extra_inbox + (epoch % 2) * extra_stride
            if INDEXED:
                _move_rows(extra_h, dst_first, extra, 0, x_len, index + src_first, scale,
                           rows, extra_row, q, ctx, R2, BC2, True, False)
            else:
                _move_rows(extra_h, dst_first, extra, src_first, x_len, index, scale, rows,
                           extra_row, q, ctx, R2, BC2, False, False)
    # every program (p, q) adds 1 to q's "data ready" counter, which reaches epoch * P once
    # all P programs of this call are done
    dl.notify(pad + w + me, 1, q, ctx, op="add")


@triton.jit
def _finish_kernel(out, out_splits, first_row, recv_index, x, x_rows, x_len, send_index,
                   send_scale, inbox, inbox_stride, mat, pad, epoch_ptr, row, cap_rows, first,
                   count, senders, extra_out, extra, extra_inbox, extra_stride, extra_row, ctx,
                   R: tl.constexpr, BC: tl.constexpr, WB: tl.constexpr,
                   COLLECT: tl.constexpr, RECV_INDEXED: tl.constexpr,
                   SEND_INDEXED: tl.constexpr, SCALED: tl.constexpr, ZERO: tl.constexpr,
                   EXTRA: tl.constexpr = False, R2: tl.constexpr = 1, BC2: tl.constexpr = 1):
    me = ctx.rank
    w = ctx.world_size
    epoch = tl.load(epoch_ptr)
    wait_range(pad, w, first, count, me, epoch * senders, ctx)
    mat_h = mat + (epoch % 2) * w * w
    offs = tl.arange(0, WB)
    col = tl.load(mat_h + offs * w + me, mask=offs < w, other=0)
    if COLLECT:
        came = tl.minimum(tl.sum(col), cap_rows)  # only the rows that came
        own_lo, own_src, own_n = _placement(mat_h, me, me, x_rows, cap_rows, w, WB)
        # out row r = received row recv_index[r] (or r), when that row came
        rows = cap_rows if RECV_INDEXED or ZERO else came
        _collect_rows(out, inbox + (epoch % 2) * inbox_stride, x, send_index, send_scale,
                      recv_index, rows, came, own_lo, own_n, own_src, x_len, row, R, BC,
                      RECV_INDEXED, SEND_INDEXED, SCALED, ZERO)
        if EXTRA:
            _collect_rows(extra_out, extra_inbox + (epoch % 2) * extra_stride, extra,
                          send_index, send_scale, recv_index, rows, came, own_lo, own_n,
                          own_src, x_len, extra_row, R2, BC2, RECV_INDEXED, SEND_INDEXED,
                          False, ZERO)
    if tl.program_id(0) == 0:
        tl.store(out_splits + offs, col, mask=offs < w)
        if not COLLECT:  # the rows stay in the inbox: where this call's half starts
            tl.store(first_row, (epoch % 2) * cap_rows)


@triton.jit
def _ack_kernel(pad, epoch_ptr, first, count, ctx):
    notify_range(pad, 2 * ctx.world_size + ctx.rank, tl.load(epoch_ptr), first, count,
                 ctx.rank, ctx)


@triton.jit
def _exchange_kernel(counts, out, mat, pad, epoch_ptr, L, first, count, ctx,
                     LB: tl.constexpr):
    me = ctx.rank
    w = ctx.world_size
    epoch = _open_epoch(epoch_ptr, pad, w, first, count, ctx)
    mat_h = mat + (epoch % 2) * w * L
    cols = tl.arange(0, LB)
    for i in range(0, count):
        q = first + i
        row = tl.load(counts + q * L + cols, mask=cols < L)
        dl.store(mat_h + me * L + cols, row, q, ctx, mask=cols < L)
        dl.notify(pad + me, epoch, q, ctx)
    wait_range(pad, 0, first, count, -1, epoch, ctx)
    for s in range(0, w):
        tl.store(out + s * L + cols, tl.load(mat_h + s * L + cols, mask=cols < L),
                 mask=cols < L)
    notify_range(pad, w + me, epoch, first, count, me, ctx)  # (notify: a barrier first)


@dataclasses.dataclass
class _Workspace:
    """The symmetric buffers and signal pad of one signature of an op here."""

    mat: torch.Tensor  # symmetric int64 [2, W, C]: the row each peer wrote, by epoch parity
    inbox: torch.Tensor | None  # symmetric [2, cap_rows * row] (all_to_all_device's rows)
    pad: torch.Tensor  # symmetric int64: ready, (data ready,) ack slots, W each
    epoch: torch.Tensor  # local int64 [1]: the device epoch
    pad_key: str  # the signal pad's name
    #: the call of this workspace's :class:`Inbox` not yet closed (its ack not yet sent)
    open_call: _Call | None = None
    #: symmetric [2, cap_rows * extra_row]: the companion rows' inbox
    #: (:func:`all_to_all_device_pair`'s ``extra``)
    extra_inbox: torch.Tensor | None = None

    @property
    def in_use(self) -> bool:
        """Whether an :class:`Inbox` of it is open: ``release_workspaces`` keeps it then."""
        return self.open_call is not None

    def release(self, heap) -> None:
        """Free the heap buffers (collective; the caller drops the signal pad)."""
        heap.free(self.mat)
        for buf in (self.inbox, self.extra_inbox):
            if buf is not None:
                heap.free(buf)


_FAST_SPLITS = FastKernel(_splits_kernel)
_FAST_DATA = FastKernel(_data_kernel)
_FAST_FINISH = FastKernel(_finish_kernel)
_FAST_ACK = FastKernel(_ack_kernel)
_FAST_EXCHANGE = FastKernel(_exchange_kernel)


def _workspace(op: str, tag: str, cols: int, slots: int,
               inbox: tuple[int, torch.dtype] | None = None,
               extra_inbox: tuple[int, torch.dtype] | None = None) -> _Workspace:
    """The workspace named ``tag`` (``mat`` of ``cols`` columns, a pad of ``slots`` W
    slots, an inbox of ``(elements, dtype)`` per half, and one for companion rows), built
    collectively the first time; refused while capturing a CUDA graph. Calls on it follow
    each other in stream order (``workspaces.follow_previous_use``)."""
    rt = current()
    key = ("a2a_device", tag)
    ws = rt.cache.get(("workspace", *key))
    if ws is None:
        if capturing():
            raise RuntimeError(f"ditron.ops.{op}: no workspace yet for this signature ({tag}); "
                               f"call it once before capturing a CUDA graph (workspaces are "
                               f"allocated collectively)")
        ws = cached(key, lambda: _new_workspace(f"a2a_device:{tag}", cols, slots, inbox,
                                                extra_inbox))
    if rt.world.backend == "cuda":  # its calls (their device epoch) follow in stream order
        follow_previous_use(ws.pad_key, rt.world.device)
    return ws


def _new_workspace(tag: str, cols: int, slots: int, inbox: tuple[int, torch.dtype] | None,
                   extra_inbox: tuple[int, torch.dtype] | None) -> _Workspace:
    rt = current()
    w = rt.world.world_size
    specs = [((2, w, max(cols, 1)), torch.int64, f"{tag}:rows")]
    if inbox is not None:
        specs.append(((2, max(inbox[0], 1)), inbox[1], f"{tag}:inbox"))
    if extra_inbox is not None:
        specs.append(((2, max(extra_inbox[0], 1)), extra_inbox[1], f"{tag}:extra"))
    bufs = alloc_buffers(specs)
    mat = bufs.tensors[0]
    mat.zero_()
    try:
        pad = signal_pad(tag, slots * w).signals  # zeroed, then a barrier: peers see it ready
    except BaseException:
        bufs.release(rt.heap)
        raise
    epoch = torch.zeros(1, dtype=torch.int64, device=rt.world.device)
    return _Workspace(mat, bufs.tensors[1] if inbox is not None else None, pad, epoch, tag,
                      extra_inbox=bufs.tensors[-1] if extra_inbox is not None else None)


def _tile_shape(backend: str, row: int, itemsize: int) -> tuple[int, int]:
    """``(R, BC)`` of the copy tiles for rows of ``row`` elements of ``itemsize`` bytes:
    ``BC`` a power of two up to ``TILE_COLS``, ``R`` rows filling ``TILE_BYTES`` and at
    most ``TILE_ELEMENTS`` elements (``NARROW_TILE_ELEMENTS`` where ``BC < WIDE_COLS``)."""
    bc = min(next_power_of_2(max(row, 1)), TILE_COLS[backend])
    cap = TILE_ELEMENTS if bc >= WIDE_COLS else NARROW_TILE_ELEMENTS
    return max(1, min(TILE_BYTES[backend] // itemsize, cap) // bc), bc


def _check_waits() -> None:
    """Raise a wait that timed out in this call's kernels (debug mode and the CPU backend;
    not while capturing)."""
    rt = current()
    if (rt.wait_timeout > 0 or rt.world.backend == "cpu") and not capturing():
        from ..runtime.diagnostics import check_waits

        check_waits()


def _index(op: str, name: str, index: torch.Tensor | None, dev: torch.device,
           size: int | None = None) -> torch.Tensor | None:
    """``index`` checked (an integer device vector, of ``size`` elements when given) and
    as contiguous int64."""
    if index is None:
        return None
    if index.device != dev or index.dim() != 1 or index.dtype.is_floating_point \
            or index.dtype.is_complex or index.dtype == torch.bool \
            or (size is not None and index.shape[0] != size):
        want = f"[{size}]" if size is not None else "vector"
        raise ValueError(f"ditron.ops.{op}: {name} must be an integer {want} on {dev}, got "
                         f"{tuple(index.shape)} {index.dtype} on {index.device}")
    return index.to(torch.int64).contiguous()


#: the dtypes ``send_scale`` can weight (those moved as themselves, not as a carrier)
SCALED_DTYPES = (torch.float16, torch.bfloat16, torch.float32)


def _scale(op: str, scale: torch.Tensor | None, x: torch.Tensor,
           send_index: torch.Tensor | None) -> torch.Tensor | None:
    """``send_scale`` checked (a floating device vector, one value per send row, for rows
    of a :data:`SCALED_DTYPES` type) and as contiguous fp32."""
    if scale is None:
        return None
    rows = x.shape[0] if send_index is None else send_index.shape[0]
    if scale.device != x.device or scale.dim() != 1 or not scale.dtype.is_floating_point \
            or scale.shape[0] != rows:
        raise ValueError(f"ditron.ops.{op}: send_scale must be a floating [{rows}] vector (one "
                         f"value per send row) on {x.device}, got {tuple(scale.shape)} "
                         f"{scale.dtype} on {scale.device}")
    if x.dtype not in SCALED_DTYPES:
        raise ValueError(f"ditron.ops.{op}: send_scale weights rows of "
                         f"{', '.join(map(str, SCALED_DTYPES))}, got x of {x.dtype}")
    return scale.to(torch.float32).contiguous()


@dataclasses.dataclass(frozen=True)
class _Call:
    """One call after its checks: the arguments as the kernels take them, its workspace and
    launch shapes (what the launches of a call share)."""

    x: torch.Tensor  # contiguous, in the dtype the rows move as
    dtype: torch.dtype  # the caller's dtype
    splits: torch.Tensor  # int64 [W]
    send_index: torch.Tensor | None
    send_scale: torch.Tensor | None
    max_out_rows: int
    row: int  # elements of a row, in x's moved dtype
    ws: _Workspace
    rt: Runtime  # the world's, which its launches ran in (an Inbox closes there)
    ctx: object
    senders: int
    tile: tuple[int, int]
    warps: int
    #: companion rows moved along the same routes (contiguous, in their moved dtype), the
    #: caller's dtype, elements per row and copy tile; ``None`` without
    extra: torch.Tensor | None = None
    extra_dtype: torch.dtype | None = None
    extra_row: int = 1
    extra_tile: tuple[int, int] = (1, 1)

    @property
    def send_rows(self) -> int:
        return self.x.shape[0] if self.send_index is None else self.send_index.shape[0]


#: the call name the device all-to-alls agree under (``_send``, ``a2a_nodes``), in whose
#: gather a rank refusing its arguments tells its peers
AGREED_AS = "ditron.ops.all_to_all_device"


def _refused() -> refused_together:
    """The entry points' checks of their own arguments: a rank refusing them tells its
    peers, which raise too, naming it: in their agreement gather on a signature's first
    call, and on every call in debug mode, where they all gather in
    :func:`_check_send_index` (``runtime.agreement.checking_data``)."""
    return refused_together(AGREED_AS, checks_data=True)


def _check_send_index(op: str, x: torch.Tensor, send_index: torch.Tensor | None) -> None:
    """Debug mode's check that ``send_index`` lies in ``[0, x.shape[0])`` (read on the
    host); collective, on every call in debug mode: a rank with a bad index raises, and so
    does every other rank, naming it, rather than waiting for it in the exchange."""
    if not checking_data():
        return
    problem = None
    if send_index is not None and send_index.numel():
        lo, hi = int(send_index.min()), int(send_index.max())
        if not (0 <= lo and hi < x.shape[0]):
            problem = f"send_index holds {lo}..{hi}, outside the {x.shape[0]} rows of x"
    raise_together(f"ditron.ops.{op}", problem)


def _check_call(op: str, x: torch.Tensor, splits: torch.Tensor, max_out_rows: int,
                send_index: torch.Tensor | None) -> tuple[int, torch.Tensor | None]:
    """The checks the entry points share (before any launch; inside :func:`_refused`);
    ``max_out_rows`` as an int and ``send_index`` as int64."""
    max_out_rows = check_int(max_out_rows, f"ditron.ops.{op}: max_out_rows")
    rt = current()
    w = rt.world.world_size
    if not isinstance(x, torch.Tensor) or not isinstance(splits, torch.Tensor):
        raise TypeError(f"ditron.ops.{op}: x and splits must be torch.Tensors (splits an "
                        f"integer [{w}] tensor on {rt.world.device}), got "
                        f"{type(x).__name__} and {type(splits).__name__}")
    if x.device != rt.world.device or splits.device != rt.world.device:
        raise ValueError(f"ditron.ops.{op}: x and splits must be on {rt.world.device}")
    if x.dim() == 0 or splits.shape != (w,) or splits.dtype.is_floating_point \
            or splits.dtype.is_complex or splits.dtype == torch.bool:
        raise ValueError(f"ditron.ops.{op}: need x with >= 1 dim and integer splits [{w}], got x "
                         f"{tuple(x.shape)}, splits {tuple(splits.shape)} {splits.dtype}")
    send_index = _index(op, "send_index", send_index, x.device)
    from .collectives import _check_tensor

    _check_tensor(op, x)
    return max_out_rows, send_index


def _moved(x: torch.Tensor) -> tuple[torch.Tensor, int, str]:
    """``x`` viewed as the type its rows move as, its elements per row, and a tag of both."""
    x = viewed(x, moved_as(x.dtype, tuple(x.shape), widen=x.dim() > 1))
    row = math.prod(x.shape[1:])
    return x, row, f"{str(x.dtype).removeprefix('torch.')}:{row}"


def _rows_tag(tag: str, max_out_rows: int) -> str:
    """The name of the workspace of rows tagged ``tag`` (:func:`_moved`) and a capacity."""
    return f"{tag}:{max_out_rows}"


#: the runtime cache's set of the workspaces (their ``pad_key``) whose :class:`Inbox` is open
_OPEN_INBOXES = "a2a_device:open_inboxes"


def _refuse_open_inbox(op: str, x: torch.Tensor, max_out_rows: int) -> None:
    """``RuntimeError`` while an :class:`Inbox` of this row shape, dtype and
    ``max_out_rows`` is open on this rank: the call would reuse its workspace and, acking,
    free its half of the inbox for the peers' next writes. Checked in :func:`_refused`, so
    that in debug mode (or with ``DITRON_CHECK_CALLS``) a peer without such an inbox
    raises too, naming this rank, instead of waiting for it in the exchange."""
    opened = current().cache.get(_OPEN_INBOXES)
    if opened and f"a2a_device:{_rows_tag(_moved(x)[2], max_out_rows)}" in opened:
        raise RuntimeError(f"ditron.ops.{op}: the Inbox of an earlier all_to_all_inbox call "
                           f"with these rows and max_out_rows is still open; close it (or "
                           f"leave its with block) once the kernels reading it are enqueued")


def _send(x: torch.Tensor, splits: torch.Tensor, max_out_rows: int,
          send_index: torch.Tensor | None, send_scale: torch.Tensor | None = None,
          extra: torch.Tensor | None = None) -> _Call:
    """Steps 1 and 2 of the protocol (the splits, then the rows, and the ``extra`` rows
    with them, to the peers' inboxes) for checked arguments."""
    rt = current()
    w = rt.world.world_size
    agree("ditron.ops.all_to_all_device", row_shape=tuple(x.shape[1:]), dtype=x.dtype,
          max_out_rows=int(max_out_rows),
          extra=None if extra is None else (tuple(extra.shape[1:]), extra.dtype))
    dtype, (x, row, tag) = x.dtype, _moved(x)
    extra_inbox = extra_dtype = None
    extra_row = 1
    if extra is not None:
        extra_dtype, (extra, extra_row, extra_tag) = extra.dtype, _moved(extra)
        tag = f"{tag}+{extra_tag}"
        extra_inbox = (max_out_rows * extra_row, extra.dtype)
    ws = _workspace("all_to_all_device", _rows_tag(tag, max_out_rows), w, 3,
                    inbox=(max_out_rows * row, x.dtype), extra_inbox=extra_inbox)
    cpu = rt.world.backend == "cpu"
    tile = _tile_shape(rt.world.backend, row, x.element_size())
    extra_tile = (1, 1)
    if extra is not None:
        # at most half the elements of the rows' tiles: a kernel's registers (and so its
        # copies' occupancy) follow its larger tile, and short rows in tall tiles carry
        # more per-row state (an fp8 row's scales in the rows' 2048: 120 registers, in
        # 1024: 60, as without them; ptxas for sm_90a, session 51)
        r2, bc2 = _tile_shape(rt.world.backend, extra_row, extra.element_size())
        extra_tile = (max(1, min(r2, tile[0] * tile[1] // (2 * bc2))), bc2)
    c = _Call(x.contiguous(), dtype, splits.to(torch.int64).contiguous(), send_index,
              send_scale, max_out_rows, row, ws, rt, rt.context(),
              SENDERS_CPU if cpu else max(MIN_SENDERS, GPU_SENDERS // w), tile,
              4 if cpu else COPY_WARPS, None if extra is None else extra.contiguous(),
              extra_dtype, extra_row, extra_tile)
    e_args = (c.x, c.ws.inbox, 0) if extra is None else (c.extra, ws.extra_inbox,
                                                         ws.extra_inbox.shape[1])
    node = rt.topo.node_ranks()
    wb = next_power_of_2(w)
    _FAST_SPLITS[(1,)](c.splits, c.send_rows, ws.mat, ws.pad, ws.epoch, node.start,
                       len(node), c.ctx, WB=wb)
    _FAST_DATA[(c.senders, w)](c.x, c.send_rows, c.x.shape[0],
                               c.splits if send_index is None else send_index,
                               c.splits if send_scale is None else send_scale, ws.inbox,
                               ws.inbox.shape[1], ws.mat, ws.pad, ws.epoch, row,
                               max_out_rows, *e_args, c.extra_row, c.ctx, R=c.tile[0],
                               BC=c.tile[1], WB=wb, INDEXED=send_index is not None,
                               SCALED=send_scale is not None, EXTRA=extra is not None,
                               R2=c.extra_tile[0], BC2=c.extra_tile[1], num_warps=c.warps)
    return c


def _finish(c: _Call, out: torch.Tensor, out_splits: torch.Tensor, first_row: torch.Tensor,
            recv_index: torch.Tensor | None, collect: bool, zero: bool = False,
            extra_out: torch.Tensor | None = None) -> None:
    """Step 3: wait for the peers' rows, write ``out_splits`` and either copy the rows to
    ``out`` (and the companion rows to ``extra_out``; ``collect``) or write where they lie
    in the inbox to ``first_row``."""
    rt = current()
    node = rt.topo.node_ranks()
    r, bc = c.tile
    tiles = cdiv(c.max_out_rows, r) * cdiv(c.row, bc)
    if not collect or rt.world.backend == "cpu":
        programs = 1
    else:
        programs = max(1, min(FINISH_PER_SM * sm_count(c.x.device), tiles))
    send_index = c.splits if c.send_index is None else c.send_index
    extra = c.extra is not None
    e_args = ((extra_out, c.extra, c.ws.extra_inbox, c.ws.extra_inbox.shape[1]) if extra
              else (out, c.x, c.ws.inbox, 0))
    _FAST_FINISH[(programs,)](out, out_splits, first_row,
                              c.splits if recv_index is None else recv_index, c.x,
                              c.send_rows, c.x.shape[0], send_index,
                              c.splits if c.send_scale is None else c.send_scale, c.ws.inbox,
                              c.ws.inbox.shape[1], c.ws.mat, c.ws.pad, c.ws.epoch, c.row,
                              c.max_out_rows, node.start, len(node), c.senders, *e_args,
                              c.extra_row, c.ctx, R=r, BC=bc,
                              WB=next_power_of_2(rt.world.world_size), COLLECT=collect,
                              RECV_INDEXED=recv_index is not None,
                              SEND_INDEXED=c.send_index is not None,
                              SCALED=c.send_scale is not None, ZERO=zero, EXTRA=extra,
                              R2=c.extra_tile[0], BC2=c.extra_tile[1], num_warps=c.warps)


def _ack(c: _Call) -> None:
    """Step 4: tell the peers this rank is done reading the call's half of its inbox (in
    the call's world, which is current)."""
    node = c.rt.topo.node_ranks()
    _FAST_ACK[(1,)](c.ws.pad, c.ws.epoch, node.start, len(node), c.ctx)
    _check_waits()


@public_op
def all_to_all_device(x: torch.Tensor, splits: torch.Tensor, max_out_rows: int, *,
                      send_index: torch.Tensor | None = None,
                      recv_index: torch.Tensor | None = None,
                      send_scale: torch.Tensor | None = None, zero_missing: bool = False,
                      ) -> tuple[torch.Tensor, torch.Tensor]:
    """Send rows ``splits[q]`` of ``x`` (dim 0, in order) to rank ``q``; ``splits`` is an
    integer device tensor ``[W]`` that may be computed on the device (no host sync).

    Returns ``(out, out_splits)``: ``out`` has ``max_out_rows`` rows, the first
    ``out_splits.sum()`` holding the rows received from ranks ``0..W-1`` in order (the rest
    is undefined); rows beyond the capacity are dropped (compare ``out_splits.sum()`` with
    ``max_out_rows``). Equivalent, with host splits, to ``dist.all_to_all_single``. A
    negative split sends nothing and splits past the send rows are cut to the rows left
    (``out_splits`` counts the rows sent), as across nodes. Every
    rank must pass the same ``max_out_rows`` and row shape. Across nodes the splits are
    read on the host (one sync; not capturable in a CUDA graph: ``a2a_nodes.py``).

    Gathers fused into the move (no extra pass over the rows; integer device vectors):
    ``send_index [S]`` sends ``x[send_index]`` instead of ``x`` (the sending kernel reads
    row ``send_index[i]`` for send row ``i``; values must lie in ``[0, x.shape[0])``,
    checked on the host in debug mode only, where every rank raises); ``recv_index
    [max_out_rows]`` makes ``out[r]`` the received row ``recv_index[r]`` (in the order
    above) when that row came, and leaves ``out[r]`` undefined otherwise (a negative or too
    large index included).

    ``send_scale [S]`` (floating, on the device; ``S`` the send rows: ``x``'s or
    ``send_index``'s length) sends row ``i`` times ``send_scale[i]``, computed in fp32 and
    rounded once to ``x``'s dtype (fp16, bf16 or fp32): a per-row weighting fused into the
    move (MoE's combine gradient). ``zero_missing``: the rows of ``out`` left undefined
    above are zero instead (one pass: the finishing kernel writes them).
    """
    op = "all_to_all_device"
    with _refused():
        max_out_rows, send_index = _check_call(op, x, splits, max_out_rows, send_index)
        recv_index = _index(op, "recv_index", recv_index, x.device, max_out_rows)
        send_scale = _scale(op, send_scale, x, send_index)
        _refuse_open_inbox(op, x, max_out_rows)
    _check_send_index(op, x, send_index)
    out, out_splits, _ = _exchange(x, None, splits, max_out_rows, send_index, recv_index,
                                   send_scale, zero_missing)
    return out, out_splits


@public_op
def all_to_all_device_pair(x: torch.Tensor, extra: torch.Tensor, splits: torch.Tensor,
                           max_out_rows: int, *, send_index: torch.Tensor | None = None,
                           recv_index: torch.Tensor | None = None,
                           zero_missing: bool = False,
                           ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """:func:`all_to_all_device` of ``x`` and, along the same routes in the same launches,
    of ``extra``: rows ``extra[i]`` (any row shape and dtype, ``extra.shape[0] ==
    x.shape[0]``) go wherever ``x[i]`` goes (``send_index``, ``recv_index``, the capacity
    cut and ``zero_missing`` apply to both). E.g. fp8 token rows and their dequantisation
    scales in one exchange instead of two. Returns ``(out, extra_out, out_splits)``,
    ``extra_out [max_out_rows, *extra.shape[1:]]``. Across nodes each row and its ``extra``
    row travel as one row of bytes (one exchange)."""
    op = "all_to_all_device_pair"
    with _refused():
        max_out_rows, send_index = _check_call(op, x, splits, max_out_rows, send_index)
        recv_index = _index(op, "recv_index", recv_index, x.device, max_out_rows)
        if not isinstance(extra, torch.Tensor) or extra.dim() == 0 \
                or extra.shape[0] != x.shape[0] or extra.device != x.device:
            raise ValueError(f"ditron.ops.{op}: extra must be a [{x.shape[0]}, ...] tensor (a "
                             f"row per row of x) on {x.device}, got "
                             f"{tuple(extra.shape) if isinstance(extra, torch.Tensor) else extra}")
        from .collectives import _check_tensor

        _check_tensor(op, extra)
    _check_send_index(op, x, send_index)
    out, out_splits, extra_out = _exchange(x, extra, splits, max_out_rows, send_index,
                                           recv_index, None, zero_missing)
    return out, extra_out, out_splits


def _exchange(x: torch.Tensor, extra: torch.Tensor | None, splits: torch.Tensor,
              max_out_rows: int, send_index: torch.Tensor | None,
              recv_index: torch.Tensor | None, send_scale: torch.Tensor | None,
              zero_missing: bool) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """The collecting all-to-all for checked arguments: ``(out, out_splits, extra_out)``."""
    if current().topo.num_nodes > 1:
        if extra is not None:  # (never scaled: the pair takes no send_scale)
            return a2a_nodes.all_to_all_device_pair(x, extra, splits, max_out_rows,
                                                    send_index, recv_index, zero_missing)
        out, out_splits = a2a_nodes.all_to_all_device(x, splits, max_out_rows, send_index,
                                                      recv_index, send_scale, zero_missing)
        return out, out_splits, None
    c = _send(x, splits, max_out_rows, send_index, send_scale, extra)
    out = torch.empty((max_out_rows, *c.x.shape[1:]), dtype=c.x.dtype, device=x.device)
    out_splits = torch.empty(len(splits), dtype=torch.int64, device=x.device)
    extra_out = None if c.extra is None else torch.empty(
        (max_out_rows, *c.extra.shape[1:]), dtype=c.extra.dtype, device=x.device)
    _finish(c, out, out_splits, out_splits, recv_index, collect=True, zero=zero_missing,
            extra_out=extra_out)
    _ack(c)
    if extra_out is not None and extra_out.dtype != c.extra_dtype:
        extra_out = extra_out.view(c.extra_dtype)
    return (out if out.dtype == c.dtype else out.view(c.dtype)), out_splits, extra_out


@dataclasses.dataclass(frozen=True)
class Inbox:
    """The rows of one :func:`all_to_all_inbox` call, read in place by later kernels.

    ``rows [2 * max_out_rows, *row]`` (``x``'s dtype) is the whole symmetric inbox; this
    call's rows start at row ``first[0]`` (a device int64 ``[1]``: the half of the call's
    device epoch): the ``splits[q]`` rows from rank ``q`` at ``first + sum(splits[:q])``
    onwards, cut at ``max_out_rows`` rows in all. The rows from this rank itself are not
    there (they never leave ``x``); their place is left free. ``close()`` (or leaving a
    ``with`` block) tells the peers the inbox may be reused: call it once every kernel
    reading ``rows`` is enqueued; a call of the same signature (row shape, dtype,
    ``max_out_rows``) before it raises ``RuntimeError`` (on every rank in debug mode,
    ``_refuse_open_inbox``). Until then ``release_workspaces`` keeps its workspace (on
    every rank). It closes in the world it was opened in, whichever is current; a second
    close, or one after that world's ``ditron.shutdown()``, does nothing. Across nodes
    (``a2a_nodes.py``) ``rows [max_out_rows, *row]`` is a tensor of its own holding every
    received row, this rank's own too, from ``first[0] = 0`` on, and closing it releases
    nothing.
    """

    rows: torch.Tensor
    splits: torch.Tensor
    first: torch.Tensor
    _call: _Call | None = None  # None across nodes: the rows are a tensor of their own

    def close(self) -> None:
        """Send the call's ack in its world (once; later calls, and calls once its world
        is shut down, do nothing)."""
        c = self._call
        if c is None or c.ws.open_call is not c:  # closed (a newer Inbox may be open)
            return
        c.ws.open_call = None
        c.rt.cache.get(_OPEN_INBOXES, set()).discard(c.ws.pad_key)
        if c.rt.closed:  # shut down: its heap, peers and signals are no world's any more
            return
        if is_initialized() and current() is c.rt:
            _ack(c)
            return
        with use(c.rt.world):
            _ack(c)

    def __enter__(self) -> Inbox:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


@public_op
def all_to_all_inbox(x: torch.Tensor, splits: torch.Tensor, max_out_rows: int, *,
                     send_index: torch.Tensor | None = None) -> Inbox:
    """:func:`all_to_all_device` without its last copy: the received rows stay in the
    inbox, where the caller's own kernel reads them (e.g. a reduction over them), and the
    rows this rank sends itself stay in ``x``. Arguments as there; returns an
    :class:`Inbox` (``splits`` as ``out_splits`` there), to be closed after use. Saves a
    pass over every received row when the consumer can read them where they lie.
    """
    with _refused():
        max_out_rows, send_index = _check_call("all_to_all_inbox", x, splits, max_out_rows,
                                               send_index)
        _refuse_open_inbox("all_to_all_inbox", x, max_out_rows)
    _check_send_index("all_to_all_inbox", x, send_index)
    if current().topo.num_nodes > 1:
        return Inbox(*a2a_nodes.inbox_rows(x, splits, max_out_rows, send_index))
    c = _send(x, splits, max_out_rows, send_index)
    out_splits = torch.empty(len(splits), dtype=torch.int64, device=x.device)
    first = torch.empty(1, dtype=torch.int64, device=x.device)
    _finish(c, out_splits, out_splits, first, None, collect=False)
    _check_waits()
    elems = 2 * max_out_rows * c.row
    rows = c.ws.inbox.reshape(-1)[:elems].view(c.dtype).view(2 * max_out_rows, *x.shape[1:])
    c.ws.open_call = c
    c.rt.cache.setdefault(_OPEN_INBOXES, set()).add(c.ws.pad_key)
    return Inbox(rows, out_splits, first, c)


@public_op
def exchange_counts(counts: torch.Tensor) -> torch.Tensor:
    """Send row ``q`` of the integer device matrix ``counts [W, L]`` to rank ``q``; returns
    ``[W, L]`` int64 whose row ``s`` is the row rank ``s`` sent here (an all-to-all of one
    small row per peer, e.g. MoE routing counts per expert). One launch, no host sync:
    capturable in a CUDA graph after a first call with this ``L`` (on one node). Every rank
    must pass the same ``L``."""
    rt = current()
    w = rt.world.world_size
    with refused_together("ditron.ops.exchange_counts"):
        if not isinstance(counts, torch.Tensor):
            raise TypeError(f"exchange_counts: counts must be an integer [{w}, L] torch.Tensor "
                            f"on {rt.world.device}, got {type(counts).__name__}")
        if counts.dim() != 2 or counts.shape[0] != w or counts.dtype.is_floating_point \
                or counts.dtype.is_complex or counts.dtype == torch.bool \
                or counts.device != rt.world.device:
            raise ValueError(f"exchange_counts: counts must be an integer [{w}, L] tensor on "
                             f"{rt.world.device}, got {tuple(counts.shape)} {counts.dtype} "
                             f"on {counts.device}")
    L = counts.shape[1]
    agree("ditron.ops.exchange_counts", cols=L)
    if rt.topo.num_nodes > 1:
        return a2a_nodes.exchange_counts(counts)
    ws = _workspace("exchange_counts", f"counts:{L}", L, 2)
    out = torch.empty((w, L), dtype=torch.int64, device=counts.device)
    if L == 0:
        return out
    node = rt.topo.node_ranks()
    _FAST_EXCHANGE[(1,)](counts.to(torch.int64).contiguous(), out, ws.mat, ws.pad, ws.epoch, L,
                         node.start, len(node), rt.context(),
                         LB=next_power_of_2(L))
    _check_waits()
    return out
