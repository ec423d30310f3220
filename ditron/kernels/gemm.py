"""One persistent Triton GEMM, written once, used by every TP GEMM operator.

``C = A @ B`` with fp32 accumulation. ``P`` programs loop over the tile ids of a tile-order
table (the distributed swizzle, ``kernels/swizzle.py``): program ``p`` takes ``order[p]``,
``order[p + P]``, ... (``tl.range``; with ``GemmConfig.flatten`` the tile loop and the K loop
are fused into one software pipeline, so the next tile's loads overlap this tile's store).
Row blocks are laid out per *segment* of ``seg_rows`` rows (one rank's rows), so a tile never
crosses a segment when ``seg_rows < M``; with ``seg_rows == M`` the tiling is the plain one
and a tile may straddle two ranks' chunks.

Hooks, all selected by ``constexpr`` switches so the plain GEMM pays nothing for them:

* ``A_REMOTE`` (colocated pull, AG-GEMM): row ``r`` of A is row ``r % a_rows`` of shard
  ``q = r // a_rows``, held in the symmetric buffer ``a_ptr`` of rank
  ``node_base + q % a_local`` at row ``(q // a_local) * a_rows + r % a_rows``; the program
  loads it from that rank's heap. ``STORE_A`` additionally writes the A rows it loads (in
  column-block 0 tiles) to ``ga_ptr``: the gathered A, for free.
* ``OWN_A`` (AG-GEMM): tiles whose rows lie within ``[own_lo, own_hi)`` load A from
  ``own_ptr`` (row ``r`` at row ``r - own_lo``: this rank's input, with A's strides) instead
  of ``a_ptr``, so the own rows need not be copied into the gathered buffer first.
* ``WAIT`` (consumer prologue): before the tile of slot ``i`` of the order the program waits
  until the chunk signals ``lo .. hi`` reach ``wait_target`` (acquire, system scope), where
  ``waits[i] = lo | hi << 32`` (:func:`slot_waits`; ``hi < lo``: no wait). Slot ``i + P``'s
  tile id and range are loaded while slot ``i`` runs, so the prologue waits on no table load.
  Chunks 0..63 are tracked per program in a bit set: when a tile needs one the program has
  not yet seen arrive, it reads the first ``min(wait_count, 64)`` signals at once (one
  acquire atomic per lane, all in flight together) and records every chunk that has
  arrived; only chunks still short are then polled one by one. After an acquire has seen a
  chunk, later tiles on its rows are ordered behind it and read no signal.
* ``EPILOGUE`` 0: store the tile in ``c``. 1 (reduce-scatter): the tile's segment is its
  destination rank ``d``; for ``d != rank`` the tile is stored into ``d``'s ``recv[rank]``
  and ``d``'s signal ``rank * tiles_per_seg + local_tile`` is set to ``epoch`` (release),
  at the program's next tile epilogue or after its last tile, before any wait of its own;
  for ``d == rank`` the program waits for every peer's signal of that tile, adds their
  partials and stores the sum in ``c`` (``[seg_rows, N]``). 2 (all-reduce): as 1, and the
  reduced own tile is stored in ``c`` (``[M, N]``) and pushed into every peer's ``bc`` with
  signal ``bc_sig[tile] = epoch``; after its tiles each program waits for the peers' reduced
  tiles and copies them from ``bc`` to ``c``.
* ``DEVICE_EPOCH`` (CUDA-graph-safe callers): ``epoch`` and ``wait_target`` are read from
  ``epoch_ptr[0]``, and ``recv`` / ``bc`` are half 0 of double buffers, the kernel taking
  half ``epoch % 2``, so a replayed launch serves a new call.

Store path (``C_TMA``, with ``GemmConfig.tma_store``): plain-store tiles of a TMA-loaded GEMM
are stored through a descriptor on ``C`` when tiles never cross a segment end.

Load paths (``USE_TMA``): by default A and B tiles are loaded through pointers (masked). With
``USE_TMA`` (CUDA capability >= 9 when A is local, ``M``, ``seg_rows`` and ``K`` are below
2**31 (TMA coordinates are int32) and the operands meet the TMA rules, or
``DITRON_GEMM_TMA=1`` on the CPU backend, whose interpreter emulates descriptors) ``a_ptr``
and ``b_ptr`` are host-side tensor descriptors (``triton.tools.tensor_descriptor``): A's on
``[rows, K]``, B's on ``[K, N]`` or, with ``B_NK``, on the contiguous ``[N, K]`` weight whose
loaded tile is transposed. Out-of-bounds elements load as zeros; rows past ``row_end`` (a
segment end) are loaded but masked at the store, as on the pointer path.

Element offsets (``row * stride``) and row numbers are int32, the cheaper arithmetic,
unless an operand or hook buffer spans more than 2**31 elements or the tiles' rows reach
2**31 (``M`` within a tile of it, or segments whose blocks pass ``M``): then ``WIDE`` makes
them int64 (``offsets.py``).

CPU backend: operands are upcast to fp32 before ``tl.dot`` (the interpreter's 16-bit dot is
wrong in triton 3.6); the interpreter runs programs one after another, so the host launches one
program there (the tile order is then followed exactly) and every wait is for other ranks.
"""

from __future__ import annotations

import dataclasses
import os

import torch
import triton
import triton.language as tl

from .. import language as dl
from ..runtime.bounded_cache import BoundedCache
from ..runtime.config import SettingsError
from ..runtime.grid_math import cdiv
from ..runtime.tensor_spans import elements_meet, shares_memory
from ..runtime.triton_launch import FastKernel
from . import descriptors, offsets
from .alignment import DIVISOR, vector_loads
from .descriptors import describe, tma_wanted, transposable
from .tile_config import check_tile_config

#: operand dtypes the GEMM multiplies (``tl.dot`` in fp32 / TF32 / 16-bit)
DTYPES = (torch.float16, torch.bfloat16, torch.float32)
EPI_STORE = 0
EPI_REDUCE_SCATTER = 1
EPI_ALL_REDUCE = 2
#: dtypes of the tile order and the wait table the kernel reads
_TILE_IDS = (torch.int32, torch.int64)
#: int64 slots per tile in the trace buffer (``GemmHooks.trace``; the kernel writes 5)
TRACE_FIELDS = 5


@dataclasses.dataclass(frozen=True)
class GemmConfig:
    """Tile configuration (a tuning knob). ``programs == 0``: one per SM on GPU, 1 on CPU.
    ``flatten``: fuse the tile loop and the K loop into one software-pipelined loop (the
    next tile's loads overlap this tile's epilogue; plain-store epilogue only).
    ``tma_store``: store ``C`` tiles through a TMA descriptor (TMA load path, plain-store
    epilogue, aligned ``C`` only)."""

    block_m: int = 128
    block_n: int = 256
    block_k: int = 64
    group_m: int = 8
    num_warps: int = 8
    num_stages: int = 3
    programs: int = 0
    flatten: bool = False
    tma_store: bool = False

    def label(self) -> str:
        extra = (("/flat" if self.flatten else "") + ("/tstore" if self.tma_store else "")
                 + (f"/p{self.programs}" if self.programs else ""))
        return (f"{self.block_m}x{self.block_n}x{self.block_k}/w{self.num_warps}"
                f"s{self.num_stages}{extra}")

    def __post_init__(self) -> None:
        check_tile_config(self)


CPU_CONFIG = GemmConfig(block_m=16, block_n=32, block_k=16, group_m=4, num_warps=1,
                        num_stages=1, programs=1, flatten=True, tma_store=True)
GPU_CONFIG = GemmConfig(flatten=True, tma_store=True)


def default_config(device: torch.device, dtype: torch.dtype = torch.bfloat16,
                   operands: tuple[torch.Tensor, torch.Tensor] | None = None,
                   epilogue: int = EPI_STORE, a_remote: bool = False, *,
                   scalar: bool | None = None) -> GemmConfig:
    """The tile configuration used when the tuner has not chosen one.

    On GPU, 128 x 256 x 64 tiles, 3 stages, 8 warps. 4-byte operands take 128 x 128 x 32
    tiles and store through registers: they multiply in IEEE fp32 on FMA units, where a
    128 x 256 tile spills (ptxas, sm_90a: 472 B per thread), and 128x256x64 fp32 tiles in
    3 stages would need 262 KB of shared memory (an H100/H200 has 227 KB).

    ``operands`` (the ``(a, b)`` the GEMM will load, when given) that are not laid out as
    a model's (``alignment.vector_loads``; ptxas, sm_90a, session 55): with the plain
    store, 128 x 128 x 32 where they take pointer loads that cannot be vectorized
    (:func:`scalar_loads`; the default tiles spill 0.9-3 KB per thread there, these
    none, and run 3.5-8x faster on an H200, session 56, though 1.2-2.6x cuBLAS's time:
    ``tune.cost_model.gemm_slowdown``); with a reduce-scatter or all-reduce ``epilogue``,
    64 x 128 x 32 there and where ``N`` is not a multiple of 16 (the epilogue loads the
    peers' ``[rows, N]`` partials; larger tiles spill 20 B-1.9 KB there, these none).
    ``a_remote`` (the colocated pull: A rows loaded from the peers' heaps through per-row
    pointers, as ``GemmHooks.a_remote``): 128 x 128 x 32 (bf16 128 x 256 x 64 spilled
    1.3 KB per thread there, on aligned operands too). ``scalar``: :func:`scalar_loads` of
    ``operands``, when the caller has it already. ``DITRON_GEMM_BLOCKS=BMxBNxBK``
    overrides the block sizes (e.g. ``16x16x16``)."""
    env = os.environ.get("DITRON_GEMM_BLOCKS")
    tiles = _tile_class(device, operands, epilogue, a_remote, scalar)
    key = (device.type, dtype, env, tiles)
    cfg = _DEFAULT_CONFIGS.get(key)
    if cfg is None:
        cfg = _DEFAULT_CONFIGS[key] = _default_config(device, dtype, env, tiles)
    return cfg


_DEFAULT_CONFIGS: dict = {}


def _tile_class(device: torch.device, operands, epilogue: int, a_remote: bool,
                scalar: bool | None) -> str:
    """Which of :func:`default_config`'s GPU tiles: ``"scatter"``, ``"scalar"`` or
    ``"default"``."""
    if device.type != "cuda":
        return "default"
    if operands is not None:
        a, b = operands
        if scalar is None:
            scalar = scalar_loads(a, b, device)
        if epilogue != EPI_STORE and (scalar or b.shape[1] % DIVISOR):
            return "scatter"
        if scalar:
            return "scalar"
    return "scalar" if a_remote else "default"


def _default_config(device: torch.device, dtype: torch.dtype, env: str | None,
                    tiles: str) -> GemmConfig:
    cfg = GPU_CONFIG if device.type == "cuda" else CPU_CONFIG
    if tiles == "scatter":
        cfg = dataclasses.replace(cfg, block_m=64, block_n=128, block_k=32, tma_store=False)
    elif device.type == "cuda" and (dtype.itemsize > 2 or tiles == "scalar"):
        cfg = dataclasses.replace(cfg, block_n=128, block_k=32, tma_store=False)
    if env:
        try:
            bm, bn, bk = (int(x) for x in env.lower().split("x"))
            cfg = dataclasses.replace(cfg, block_m=bm, block_n=bn, block_k=bk)
        except ValueError as exc:
            raise SettingsError(f"DITRON_GEMM_BLOCKS must be BMxBNxBK, e.g. 64x128x32, got "
                             f"{env!r} ({exc})") from None
    return cfg


def scalar_loads(a: torch.Tensor, b: torch.Tensor, device: torch.device) -> bool:
    """Whether the GEMM of ``a @ b`` on ``device``, a GPU, would load an operand through
    pointers that cannot be vectorized (``alignment.vector_loads``): ``a`` or ``b``
    unaligned (e.g. ``K``, or a row-major ``b``'s ``N``, not a multiple of 16 elements)
    and not on the TMA path (where the device and the operands allow it, at
    :data:`GPU_CONFIG`'s boxes). ``False`` off CUDA."""
    if device.type != "cuda" or (vector_loads(a) and vector_loads(b)):
        return False
    return not (tma_wanted(device) and tma_operands(a, b, GPU_CONFIG) is not None)


def smem_bytes(cfg: GemmConfig, itemsize: int) -> int:
    """Shared memory ``cfg`` needs (as Triton 3.6 lays it out on Hopper): A and B tiles for
    every stage, plus the C tile staged for a TMA store (or half of it for the layout
    conversion of a flattened loop's store)."""
    pipeline = (cfg.block_m + cfg.block_n) * cfg.block_k * itemsize * max(cfg.num_stages, 1)
    tile = cfg.block_m * cfg.block_n * itemsize
    return pipeline + (tile if cfg.tma_store else tile // 2 if cfg.flatten else 0)


def fits(cfg: GemmConfig, device: torch.device, dtype: torch.dtype) -> bool:
    """Whether ``cfg``'s pipeline fits the device's shared memory (always on the CPU)."""
    if device.type != "cuda":
        return True
    props = torch.cuda.get_device_properties(device)
    limit = getattr(props, "shared_memory_per_block_optin", 0) or 227 * 1024
    itemsize = dtype.itemsize
    return smem_bytes(cfg, itemsize) <= limit


def num_programs(cfg: GemmConfig, device: torch.device, num_tiles: int) -> int:
    if device.type != "cuda":
        return 1  # sequential programs: one program follows the tile order exactly
    if cfg.programs > 0:
        return max(1, min(cfg.programs, num_tiles))
    sms = torch.cuda.get_device_properties(device).multi_processor_count
    return max(1, min(sms, num_tiles))


@triton.jit
def _tile_rows(mb, seg_rows, blocks_per_seg, M, BLOCK_M: tl.constexpr):
    """Segment, its first row, and rows ``[row0, row_end)`` of row block ``mb`` (int32,
    as TMA coordinates must be). ``row_end`` is found without a sum past ``M``:
    ``row0 + BLOCK_M`` and ``seg_start + seg_rows`` wrap where ``M`` is within a tile or a
    segment of 2**31 (``row0 + i`` then wraps too: ``WIDE`` widens ``i``)."""
    seg = mb // blocks_per_seg
    seg_start = seg * seg_rows
    row0 = seg_start + (mb % blocks_per_seg) * BLOCK_M
    seg_end = seg_start + tl.minimum(seg_rows, M - seg_start)
    row_end = row0 + tl.minimum(seg_end - row0, BLOCK_M)
    return seg, seg_start, row0, row_end


@triton.jit
def _wide(x, WIDE: tl.constexpr):
    """``x`` as int64 when ``WIDE``, else unchanged (element offsets past 2**31)."""
    if WIDE:
        x = tl.cast(x, tl.int64)
    return x


@triton.jit
def _arrived_chunks(sig_ptr, count, target):
    """Bit ``c`` set for each chunk signal ``c < min(count, 64)`` that is ``>= target``:
    one acquire atomic (system scope) per lane, all lanes in flight together. Every thread's
    later loads are ordered after the lanes' acquires: the sum reaches each thread through
    shared memory and a CTA barrier (an explicit ``tl.debug_barrier`` here would stop
    Triton 3.6 from pipelining the flattened tile loop)."""
    lanes = tl.arange(0, 64)
    mask = lanes < count
    vals = tl.atomic_add(sig_ptr + lanes, 0, mask=mask, sem="acquire", scope="sys")
    one = tl.full((64,), 1, tl.int64)
    bits = tl.where(mask & (vals >= target), one << lanes.to(tl.int64), 0)
    return tl.sum(bits, axis=0)


@triton.jit(do_not_specialize=["wait_target", "epoch", "own_lo", "own_hi"])
def persistent_gemm(
    a_ptr, b_ptr, c_ptr, M, N, K,
    stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
    order_ptr, num_tiles, n_blocks, seg_rows, blocks_per_seg,
    a_rows, a_local, node_base,
    waits_ptr, wait_sig_ptr, wait_target, wait_count,
    ga_ptr, stride_gm, stride_gk,
    recv_ptr, stride_rs, stride_rm, stride_rn,
    rs_sig_ptr, bc_ptr, bc_sig_ptr, epoch, epoch_ptr,
    trace_ptr,
    own_ptr, own_lo, own_hi,
    ctx,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
    A_REMOTE: tl.constexpr, STORE_A: tl.constexpr, WAIT: tl.constexpr,
    EPILOGUE: tl.constexpr, DOT_PRECISION: tl.constexpr, UPCAST: tl.constexpr,
    TRACE: tl.constexpr = False, GPU_TIMER: tl.constexpr = False,
    USE_TMA: tl.constexpr = False, B_NK: tl.constexpr = False, C_TMA: tl.constexpr = False,
    FLATTEN: tl.constexpr = False, DEVICE_EPOCH: tl.constexpr = False,
    OWN_A: tl.constexpr = False, WIDE: tl.constexpr = False,
):
    pid = tl.program_id(0)
    nprog = tl.num_programs(0)
    if DEVICE_EPOCH:
        # the call's epoch lives on the device (CUDA-graph replays): it is the wait target,
        # the value the epilogue signals carry, and its parity picks the half of recv / bc
        epoch = tl.load(epoch_ptr)
        wait_target = epoch
        if EPILOGUE != 0:
            recv_ptr += (epoch % 2) * ctx.world_size * stride_rs
        if EPILOGUE == 2:
            bc_ptr += (epoch % 2) * M * N
    # WIDE (an operand spans 2**31 elements or more): element offsets in int64, else the
    # int32 products row * stride would wrap
    offs_m = _wide(tl.arange(0, BLOCK_M), WIDE)
    offs_n = _wide(tl.arange(0, BLOCK_N), WIDE)
    offs_k = _wide(tl.arange(0, BLOCK_K), WIDE)
    tiles_per_seg = blocks_per_seg * n_blocks
    # chunks 0..63 this program has already seen arrive: its earlier acquire still orders
    # its later loads, so later tiles on those rows skip the poll
    seen = tl.full((), 0, tl.int64)
    # a pushed tile's signal is raised at the next tile's epilogue (or after the loop), so
    # its release fence finds the stores drained by that tile's main loop (2.3% faster on 2
    # H200s, docs/perf.md session 7); it is raised before any wait of this program, so no
    # two programs can wait on each other
    pend_slot = tl.full((), -1, tl.int64)
    pend_peer = tl.full((), 0, tl.int32)
    # each slot's tile id (and wait range) is read one tile ahead, so a tile's prologue does
    # not wait on a load (program pid < num_tiles: the grid has at most one per tile)
    last = num_tiles - 1
    next_tile = tl.load(order_ptr + pid)
    if WAIT:
        next_wait = tl.load(waits_ptr + pid)
    for i in tl.range(pid, num_tiles, nprog, flatten=FLATTEN):
        tile = next_tile
        ahead = tl.minimum(i + nprog, last)
        next_tile = tl.load(order_ptr + ahead)
        if WAIT:
            c = next_wait.to(tl.int32)  # the low half
            hi = (next_wait >> 32).to(tl.int32)
            next_wait = tl.load(waits_ptr + ahead)
        mb = tile // n_blocks
        nb = tile % n_blocks
        seg, seg_start, row0, row_end = _tile_rows(mb, seg_rows, blocks_per_seg, M, BLOCK_M)
        waited = False
        if TRACE:
            t_start = dl.timestamp(trace_ptr, GPU_TIMER)
            tl.store(trace_ptr + 1 + i * 5, tile.to(tl.int64))
            tl.store(trace_ptr + 2 + i * 5, t_start)
        if WAIT:
            waited = c <= hi
            polled = tl.full((), 0, tl.int32)
            if waited & (c < 64):
                top = tl.minimum(hi, 63).to(tl.int64)
                # bits c..top; 2 << 63 wraps to 0, so top == 63 still gives the right mask
                need = ((tl.full((), 2, tl.int64) << top) - 1) & ~(
                    (tl.full((), 1, tl.int64) << c.to(tl.int64)) - 1)
                if (seen & need) != need:
                    seen = seen | _arrived_chunks(wait_sig_ptr, wait_count, wait_target)
                    polled = tl.full((), 1, tl.int32)
            while c <= hi:
                bit = tl.full((), 1, tl.int64) << (c % 64).to(tl.int64)
                if (c >= 64) | ((seen & bit) == 0):
                    dl.wait(wait_sig_ptr + c, wait_target, ctx)
                    polled = tl.full((), 1, tl.int32)
                    if c < 64:
                        seen = seen | bit
                c += 1
            # TMA loads go through the async proxy: order them after a new acquire (the
            # fence after an earlier one still orders this tile's loads)
            if USE_TMA:
                if polled != 0:
                    dl.fence_async_proxy(GPU_TIMER)
        if TRACE:
            if waited:
                tl.store(trace_ptr + 3 + i * 5, dl.timestamp(trace_ptr, GPU_TIMER))
            else:
                tl.store(trace_ptr + 3 + i * 5, t_start)
        rm = row0 + offs_m
        rn = nb * BLOCK_N + offs_n
        m_mask = rm < row_end
        n_mask = rn < N
        a_src = a_ptr  # where this tile's A rows are read: a descriptor or a pointer
        a_row = row0
        if OWN_A:
            if (row0 >= own_lo) & (row0 + BLOCK_M <= own_hi):
                a_src = own_ptr
                a_row = row0 - own_lo
        if not USE_TMA:
            if A_REMOTE:
                q = tl.where(m_mask, rm // a_rows, 0)
                owner = node_base + q % a_local
                local_row = (q // a_local) * a_rows + rm % a_rows
                a_ptrs = a_ptr + local_row[:, None] * stride_am + offs_k[None, :] * stride_ak
                a_ptrs = dl.translate_each(a_ptrs, owner[:, None], ctx)
            else:
                a_ptrs = (a_src + (a_row + offs_m)[:, None] * stride_am
                          + offs_k[None, :] * stride_ak)
            b_ptrs = b_ptr + offs_k[:, None] * stride_bk + rn[None, :] * stride_bn
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for k0 in range(0, K, BLOCK_K):
            k_mask = (k0 + offs_k) < K
            if USE_TMA:
                a = a_src.load([a_row, k0])
                if B_NK:
                    b = b_ptr.load([nb * BLOCK_N, k0]).T
                else:
                    b = b_ptr.load([k0, nb * BLOCK_N])
            else:
                a = tl.load(a_ptrs, mask=m_mask[:, None] & k_mask[None, :], other=0.0)
                b = tl.load(b_ptrs, mask=k_mask[:, None] & n_mask[None, :], other=0.0)
            if STORE_A:
                if nb == 0:
                    g_ptrs = (ga_ptr + rm[:, None] * stride_gm
                              + (k0 + offs_k)[None, :] * stride_gk)
                    tl.store(g_ptrs, a, mask=m_mask[:, None] & k_mask[None, :])
            if UPCAST:
                acc = tl.dot(a.to(tl.float32), b.to(tl.float32), acc,
                             input_precision=DOT_PRECISION)
            else:
                acc = tl.dot(a, b, acc, input_precision=DOT_PRECISION)
            if not USE_TMA:  # WIDE: a K stride past 2**31 / BLOCK_K wraps the step in int32
                a_ptrs += BLOCK_K * _wide(stride_ak, WIDE)
                b_ptrs += BLOCK_K * _wide(stride_bk, WIDE)
        if TRACE:  # the main loop is done (its last MMAs may still be in flight)
            tl.store(trace_ptr + 4 + i * 5, dl.timestamp(trace_ptr, GPU_TIMER))
        tile_mask = m_mask[:, None] & n_mask[None, :]
        if C_TMA:
            c_ptr.store([row0, nb * BLOCK_N], acc.to(c_ptr.dtype))
        elif EPILOGUE == 0:
            out_dtype = c_ptr.dtype.element_ty
            c_ptrs = c_ptr + rm[:, None] * stride_cm + rn[None, :] * stride_cn
            tl.store(c_ptrs, acc.to(out_dtype), mask=tile_mask)
        else:
            out_dtype = c_ptr.dtype.element_ty
            local_rows = rm - seg_start
            local_tile = (mb % blocks_per_seg) * n_blocks + nb
            if pend_slot >= 0:
                dl.notify(rs_sig_ptr + pend_slot, epoch, pend_peer, ctx)
                pend_slot = tl.full((), -1, tl.int64)
            if seg != ctx.rank:
                r_ptrs = (recv_ptr + _wide(ctx.rank, WIDE) * stride_rs
                          + local_rows[:, None] * stride_rm + rn[None, :] * stride_rn)
                dl.store(r_ptrs, acc.to(out_dtype), seg, ctx, mask=tile_mask)
                pend_slot = (ctx.rank * tiles_per_seg + local_tile).to(tl.int64)
                pend_peer = seg.to(tl.int32)
            else:
                s = 0
                while s < ctx.world_size:
                    if s != ctx.rank:
                        dl.wait(rs_sig_ptr + s * tiles_per_seg + local_tile, epoch, ctx)
                        r_ptrs = (recv_ptr + _wide(s, WIDE) * stride_rs
                                  + local_rows[:, None] * stride_rm + rn[None, :] * stride_rn)
                        part = tl.load(r_ptrs, mask=tile_mask, other=0.0)
                        acc += part.to(tl.float32)
                    s += 1
                result = acc.to(out_dtype)
                if EPILOGUE == 1:
                    c_ptrs = c_ptr + local_rows[:, None] * stride_cm + rn[None, :] * stride_cn
                    tl.store(c_ptrs, result, mask=tile_mask)
                else:
                    c_ptrs = c_ptr + rm[:, None] * stride_cm + rn[None, :] * stride_cn
                    tl.store(c_ptrs, result, mask=tile_mask)
                    bc_ptrs = bc_ptr + rm[:, None] * N + rn[None, :]
                    p = 0
                    while p < ctx.world_size:
                        if p != ctx.rank:
                            dl.store(bc_ptrs, result, p, ctx, mask=tile_mask)
                            dl.notify(bc_sig_ptr + tile, epoch, p, ctx)
                        p += 1
        if TRACE:
            tl.store(trace_ptr + 5 + i * 5, dl.timestamp(trace_ptr, GPU_TIMER))
    if EPILOGUE != 0:
        if pend_slot >= 0:
            dl.notify(rs_sig_ptr + pend_slot, epoch, pend_peer, ctx)
    if EPILOGUE == 2:
        # all-gather phase: the reduced tiles of the other ranks' rows land in ``bc``
        j = pid
        while j < num_tiles:
            tile = tl.load(order_ptr + j)
            mb = tile // n_blocks
            nb = tile % n_blocks
            seg, seg_start, row0, row_end = _tile_rows(mb, seg_rows, blocks_per_seg, M,
                                                       BLOCK_M)
            if seg != ctx.rank:
                dl.wait(bc_sig_ptr + tile, epoch, ctx)
                rm = row0 + offs_m
                rn = nb * BLOCK_N + offs_n
                tile_mask = (rm < row_end)[:, None] & (rn < N)[None, :]
                vals = tl.load(bc_ptr + rm[:, None] * N + rn[None, :], mask=tile_mask)
                tl.store(c_ptr + rm[:, None] * stride_cm + rn[None, :] * stride_cn, vals,
                         mask=tile_mask)
            j += nprog


@dataclasses.dataclass
class GemmHooks:
    """Optional hook arguments of :func:`persistent_gemm` (see the module docstring)."""

    a_remote: bool = False
    a_rows: int = 1
    a_local: int = 1
    node_base: int = 0
    gathered: torch.Tensor | None = None
    #: int64 per slot of the tile order: the chunk range ``lo | hi << 32`` its tile waits
    #: for (:func:`slot_waits`), on ``c``'s device; with ``wait_sig`` (the chunk signals)
    waits: torch.Tensor | None = None
    wait_sig: torch.Tensor | None = None
    wait_target: int = 0
    epilogue: int = EPI_STORE
    recv: torch.Tensor | None = None  # [W, seg_rows, N] symmetric
    rs_sig: torch.Tensor | None = None
    bc: torch.Tensor | None = None  # [M, N] symmetric, contiguous
    bc_sig: torch.Tensor | None = None
    epoch: int = 0
    #: int64 [1] on the device: the call's epoch is read from it (the wait target and the
    #: epilogue's signal value), and ``recv`` / ``bc`` are half 0 of contiguous double buffers
    #: whose half ``epoch % 2`` the kernel uses (the CUDA-graph-safe paths)
    epoch_cell: torch.Tensor | None = None
    #: int64 ``[1 + TRACE_FIELDS * num_tiles]``: a counter, then per tile (tile id, start,
    #: chunks ready, main loop done, end): ``end`` minus ``main loop done`` is the epilogue
    #: (stores, and for reduce-scatter tiles the pushes or the waits for the peers' partials)
    trace: torch.Tensor | None = None
    #: ``[rows, K]`` row-major, 16-byte aligned (:func:`own_rows_ok`): rows
    #: ``own_lo .. own_lo + rows`` of A are read from it (``OWN_A``)
    own_a: torch.Tensor | None = None
    own_lo: int = 0


def slot_waits(order: torch.Tensor, lo: torch.Tensor, hi: torch.Tensor,
               n_blocks: int) -> torch.Tensor:
    """The consumer's wait table by slot (``GemmHooks.waits``): for slot ``i`` of ``order``
    (tile ids, ``n_blocks`` column blocks per row block) the chunk range ``[lo[mb], hi[mb]]``
    of its row block ``mb = order[i] // n_blocks``, packed as ``lo | hi << 32`` (int64, on
    ``order``'s device). ``lo``/``hi``: per row block, as ``plan.deps.consumer_waits``
    gives them (``hi < lo``: no wait)."""
    mb = order.long() // n_blocks
    lo = lo.to(order.device).long()[mb]
    hi = hi.to(order.device).long()[mb]
    # the kernel reads each half as an int32: a larger ``hi`` wrapped to a negative one (no
    # wait at all); a negative ``hi`` is "no wait" and is kept as it is
    if lo.numel() and (int(lo.min()) < 0 or int(lo.max()) >= 1 << 31
                       or int(hi.min()) < -(1 << 31) or int(hi.max()) >= 1 << 31):
        raise ValueError("slot_waits: chunk ids must lie in [0, 2**31)")
    return (lo & 0xFFFFFFFF) | (hi << 32)


def own_rows_ok(own: torch.Tensor, a: torch.Tensor, cfg: GemmConfig) -> bool:
    """Whether the GEMM can read rows of its A (``a``) from ``own`` in place (``OWN_A``):
    the same row-major layout, 16-byte aligned, and whole row blocks, so no tile reads rows
    from both."""
    es = own.element_size()
    return (own.dim() == 2 and own.shape[0] % cfg.block_m == 0 and own.dtype == a.dtype
            and own.stride() == (a.stride(0), 1) and a.stride(1) == 1
            and own.data_ptr() % 16 == 0 and (own.stride(0) * es) % 16 == 0)


def tma_operands(a: torch.Tensor, b: torch.Tensor, cfg: GemmConfig):
    """``(a_desc, b_desc, b_nk)`` for the TMA load path, or ``None`` when the operands
    break the TMA rules (``descriptors.describe``). B is described on ``[K, N]`` when
    row-major, else on the contiguous ``[N, K]`` of ``b.t()`` (``b_nk``: the kernel
    transposes the loaded tile; 16-bit operands only, :func:`descriptors.transposable`); A
    only row-major."""
    if a.dtype != b.dtype:
        return None
    a_tma = describe(a, (cfg.block_m, cfg.block_k))
    b_tma = describe(b, (cfg.block_k, cfg.block_n))
    if a_tma is None or a_tma[1] or b_tma is None or (b_tma[1] and not transposable(b.dtype)):
        return None
    return a_tma[0], b_tma[0], b_tma[1]


def launch_gemm(a: torch.Tensor, b: torch.Tensor, c: torch.Tensor, M: int, *,
                order: torch.Tensor, seg_rows: int, cfg: GemmConfig,
                hooks: GemmHooks | None = None, ctx=None, use_tma: bool | None = None) -> None:
    """Run the persistent GEMM: ``c[rows] = a[rows] @ b`` over ``M`` rows with the hooks.
    Arguments as :func:`gemm_launch`."""
    launch = gemm_launch(a, b, c, M, order=order, seg_rows=seg_rows, cfg=cfg, hooks=hooks,
                         ctx=ctx, use_tma=use_tma)
    if launch is not None:
        grid, args, kwargs = launch
        _GEMM[grid](*args, **kwargs)


def gemm_launch(a: torch.Tensor, b: torch.Tensor, c: torch.Tensor, M: int, *,
                order: torch.Tensor, seg_rows: int, cfg: GemmConfig,
                hooks: GemmHooks | None = None, ctx=None, use_tma: bool | None = None):
    """``(grid, args, kwargs)`` of :func:`persistent_gemm` for ``c[rows] = a[rows] @ b``
    over ``M`` rows, or ``None`` when there is no tile.

    ``a``: ``[M, K]`` (or the local symmetric shard buffer when ``hooks.a_remote``), ``b``:
    ``[K, N]`` with any strides, ``c``: output (``[M, N]``, or ``[seg_rows, N]`` for the
    reduce-scatter epilogue), ``a`` and ``b`` on ``c``'s device. ``order`` (int32 or int64
    tile ids, contiguous, as is ``hooks.waits``) and the hooks' tensors: on ``c``'s
    device. ``use_tma``: see :func:`tma_wanted`; the TMA path is taken only for a local A
    whose operands meet the TMA rules (:func:`tma_operands`), else the pointer path.
    Shapes, dtypes or hooks that do not fit this raise ``ValueError`` before the launch,
    as do a ``c`` (or ``hooks.gathered``) whose elements share memory or meet ``a``'s,
    ``b``'s or ``hooks.own_a``'s (the GEMM would read what it wrote), and, where the
    tables are on the CPU (on a GPU reading them would stall the host: they are trusted
    there), an ``order`` id outside the tiling's ``[0, tiles)`` or a wait range outside
    ``hooks.wait_sig``. The order need not be a permutation (the ops' orders skip empty
    tiles); a tile it repeats is computed again.
    """
    hooks = hooks or _NO_HOOKS
    device = c.device
    for name, t in (("a", a), ("b", b), ("order", order), ("hooks.waits", hooks.waits)):
        if t is not None and t.device != device:  # the kernel reads them
            raise ValueError(f"launch_gemm: {name} is on {t.device}, c on {device}")
    for name, t in (("order", order), ("hooks.waits", hooks.waits)):
        # the kernel reads slot i at element i: a strided view's values are not there
        if t is not None and (t.dtype not in _TILE_IDS or t.dim() != 1
                              or not t.is_contiguous()):
            raise ValueError(f"launch_gemm: {name} must be a contiguous 1-D int32 or int64 "
                             f"tensor, got {t.dtype} {tuple(t.shape)} with strides "
                             f"{t.stride()}")
    if (hooks.waits is None) != (hooks.wait_sig is None):
        raise ValueError("launch_gemm: hooks.waits and hooks.wait_sig go together")
    if hooks.epilogue != EPI_STORE:
        _check_epilogue(hooks)
    if hooks.waits is not None and (hooks.waits.dtype != torch.int64
                                    or hooks.waits.shape != order.shape):
        raise ValueError(f"launch_gemm: hooks.waits must be int64 {tuple(order.shape)} (one "
                         f"per slot of the order), got {hooks.waits.dtype} "
                         f"{tuple(hooks.waits.shape)}")
    K, N = b.shape
    num_tiles = order.numel()
    if num_tiles == 0:
        return None
    _check_apart(a, b, c, hooks)
    dummy = order  # any tensor: unused pointer arguments
    if ctx is None:
        from ..runtime.symmetric import context

        ctx = context() if (hooks.a_remote or hooks.wait_sig is not None
                            or hooks.epilogue != EPI_STORE) else _local_context(c.device)
    ga = hooks.gathered
    recv = hooks.recv
    # hook tensors an offset may pass 2**31 in (a, b, c: checked in the cached part)
    # the hook buffers' spans here, a's, b's and c's in the cached part
    static = _static_launch(a, b, c, M, seg_rows, num_tiles, cfg, hooks, use_tma,
                            offsets.wide(ga, recv, hooks.bc, hooks.own_a))
    grid, n_blocks, blocks_per_seg, tma_b, c_tma, kwargs = static
    if order.device.type == "cpu":  # on a GPU, reading the tables would stall the host
        _check_tables(order, hooks, _tiles_of(M, seg_rows, blocks_per_seg, n_blocks))
    a_arg, b_arg, c_arg = a, b, c
    own = hooks.own_a
    own_arg = own if own is not None else dummy
    if tma_b is not None:
        from triton.tools.tensor_descriptor import TensorDescriptor

        a_arg = TensorDescriptor(a, [a.shape[0], K], [a.stride(0), 1],
                                 [cfg.block_m, cfg.block_k])
        if own is not None:
            own_arg = TensorDescriptor(own, [own.shape[0], K], [own.stride(0), 1],
                                       [cfg.block_m, cfg.block_k])
        if tma_b == "nk":
            w = b.t()
            b_arg = TensorDescriptor(w, [N, K], [w.stride(0), 1], [cfg.block_n, cfg.block_k])
        else:
            b_arg = TensorDescriptor(b, [K, N], [b.stride(0), 1], [cfg.block_k, cfg.block_n])
        if c_tma:
            c_arg = TensorDescriptor(c, [M, N], [c.stride(0), 1], [cfg.block_m, cfg.block_n])
    args = (
        a_arg, b_arg, c_arg, M, N, K,
        a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0), c.stride(1),
        order, num_tiles, n_blocks, max(seg_rows, 1), blocks_per_seg,
        hooks.a_rows, hooks.a_local, hooks.node_base,
        hooks.waits if hooks.waits is not None else dummy,
        hooks.wait_sig if hooks.wait_sig is not None else dummy,
        hooks.wait_target,
        hooks.wait_sig.numel() if hooks.wait_sig is not None else 0,
        ga if ga is not None else c, ga.stride(0) if ga is not None else 0,
        ga.stride(1) if ga is not None else 0,
        recv if recv is not None else c,
        recv.stride(0) if recv is not None else 0,
        recv.stride(1) if recv is not None else 0,
        recv.stride(2) if recv is not None else 0,
        hooks.rs_sig if hooks.rs_sig is not None else dummy,
        hooks.bc if hooks.bc is not None else c,
        hooks.bc_sig if hooks.bc_sig is not None else dummy,
        hooks.epoch,
        hooks.epoch_cell if hooks.epoch_cell is not None else dummy,
        hooks.trace if hooks.trace is not None else dummy,
        own_arg, hooks.own_lo, hooks.own_lo + (own.shape[0] if own is not None else 0),
        ctx,
    )
    return grid, args, kwargs


def _check_apart(a: torch.Tensor, b: torch.Tensor, c: torch.Tensor, hooks: GemmHooks) -> None:
    """Raise ``ValueError`` where the GEMM would read what it writes: ``c`` (or the
    gathered A, ``hooks.gathered``) with two elements at one address (an expanded view:
    tiles race), or with an element in ``a``, ``b`` or ``hooks.own_a`` (``c`` as ``a``: a
    later tile reads rows an earlier one overwrote). Told by storage first (a fresh ``c``
    costs one comparison per operand, ~0.7 us), then by the elements' addresses."""
    ins = [("a", a), ("b", b)] + ([("hooks.own_a", hooks.own_a)]
                                  if hooks.own_a is not None else [])
    outs = [("c", c)] + ([("hooks.gathered", hooks.gathered)]
                         if hooks.gathered is not None else [])
    for out_name, out in outs:
        if shares_memory(out):
            raise ValueError(f"launch_gemm: {out_name} {tuple(out.shape)} with strides "
                             f"{out.stride()} has elements that share memory (an expanded "
                             f"view?): tiles would overwrite each other")
        home = out.untyped_storage().data_ptr()  # 0: no memory (a meta tensor)
        for in_name, t in ins:
            if (home and t.untyped_storage().data_ptr() == home and t.numel() and out.numel()
                    and elements_meet(out, t)):
                raise ValueError(f"launch_gemm: {out_name} overlaps {in_name} in memory: "
                                 f"the GEMM would read elements it has already written "
                                 f"(write into a separate tensor)")


def _tiles_of(M: int, seg_rows: int, blocks_per_seg: int, n_blocks: int) -> int:
    """The tile ids of the segmented tiling of ``M`` rows: ``[0, tiles)``."""
    segments = max(1, cdiv(M, seg_rows)) if 0 < seg_rows < M else 1
    return segments * blocks_per_seg * n_blocks


def _check_tables(order: torch.Tensor, hooks: GemmHooks, tiles: int) -> None:
    """Raise ``ValueError`` unless every id of ``order`` names a tile (``[0, tiles)``: a
    negative one stored before ``c``, with an epilogue a segment past the last pushed to a
    rank that is not there) and every wait range of ``hooks.waits`` (``lo | hi << 32``,
    ``hi < lo``: none) lies within ``hooks.wait_sig`` (a chunk past it polled memory after
    the signals). Host tables only (the caller's check)."""
    lo_id, hi_id = int(order.min()), int(order.max())
    if lo_id < 0 or hi_id >= tiles:
        raise ValueError(f"launch_gemm: order holds tile ids in [{lo_id}, {hi_id}]; this "
                         f"tiling has {tiles} tiles, ids [0, {tiles})")
    waits = hooks.waits
    if waits is None or waits.device.type != "cpu":
        return
    low = waits & 0xFFFFFFFF
    low = torch.where(low >= 1 << 31, low - (1 << 32), low)  # the kernel's int32 halves
    high = waits >> 32
    live = low <= high
    if not bool(live.any()):
        return
    count = hooks.wait_sig.numel()
    first, last = int(low[live].min()), int(high[live].max())
    if first < 0 or last >= count:
        raise ValueError(f"launch_gemm: hooks.waits names chunks [{first}, {last}]; "
                         f"hooks.wait_sig holds {count} signals, chunks [0, {count})")


def _check_epilogue(hooks: GemmHooks) -> None:
    """Raise ``ValueError`` unless ``hooks.epilogue`` is one of the kernel's and the
    buffers it writes and signals are given (the kernel would use ``c`` in their place)."""
    need = {EPI_REDUCE_SCATTER: ("recv", "rs_sig"), EPI_ALL_REDUCE: ("recv", "rs_sig", "bc",
                                                                     "bc_sig")}
    if hooks.epilogue not in need:
        raise ValueError(f"launch_gemm: hooks.epilogue must be EPI_STORE, "
                         f"EPI_REDUCE_SCATTER or EPI_ALL_REDUCE, got {hooks.epilogue!r}")
    missing = [f"hooks.{n}" for n in need[hooks.epilogue] if getattr(hooks, n) is None]
    if missing:
        raise ValueError(f"launch_gemm: epilogue {hooks.epilogue} needs "
                         f"{', '.join(missing)}")


_NO_HOOKS = GemmHooks()
_GEMM = FastKernel(persistent_gemm)
#: launches' static parts by key, bounded: shapes that keep changing must not grow it
_STATIC = BoundedCache(1024)


def _static_launch(a, b, c, M, seg_rows, num_tiles, cfg, hooks, use_tma, wide=False):
    """What a launch derives from shapes, strides, dtypes, alignment and switches alone
    (grid, block counts, TMA decisions, constexprs), computed once per distinct key."""
    key = (a.shape, a.stride(), a.dtype, a.data_ptr() % 16, b.shape, b.stride(), b.dtype,
           b.data_ptr() % 16, c.shape, c.stride(), c.dtype, c.data_ptr() % 16, c.device, M,
           seg_rows, num_tiles, cfg, hooks.a_remote, hooks.gathered is not None,
           hooks.wait_sig is not None, hooks.epilogue, hooks.trace is not None,
           hooks.epoch_cell is not None, use_tma, hooks.own_a is not None,
           os.environ.get("DITRON_GEMM_TMA", ""), wide)
    static = _STATIC.get(key)
    if static is not None:
        return static
    _check_operands(a, b, c, M, seg_rows, hooks)
    K, N = b.shape
    tma_b = None
    c_tma = False
    # TMA coordinates are int32: rows or K from 2**31 on (int64 there) do not compile;
    # no descriptor of zero rows (Triton's asserts on an empty shape: C's is [M, N])
    if (not hooks.a_remote and 0 < min(M, K) and max(M, seg_rows, K) < offsets.INT32_SPAN
            and tma_wanted(c.device, use_tma)):
        tma = tma_operands(a, b, cfg)
        if tma is not None:
            tma_b = "nk" if tma[2] else "kn"
            c_tma = (cfg.tma_store and hooks.epilogue == EPI_STORE
                     and (seg_rows >= M or seg_rows % cfg.block_m == 0)
                     and descriptors.fits(c, cfg.block_n))
    kwargs = dict(
        BLOCK_M=cfg.block_m, BLOCK_N=cfg.block_n, BLOCK_K=cfg.block_k,
        A_REMOTE=hooks.a_remote, STORE_A=hooks.gathered is not None,
        WAIT=hooks.wait_sig is not None, EPILOGUE=hooks.epilogue,
        DOT_PRECISION="ieee" if a.dtype == torch.float32 else "tf32", UPCAST=_interpreted(),
        TRACE=hooks.trace is not None, GPU_TIMER=c.device.type == "cuda",
        USE_TMA=tma_b is not None, B_NK=tma_b == "nk", C_TMA=c_tma,
        # triton 3.6 cannot fuse the loops around the reduce-scatter/all-reduce epilogues
        # (TritonGPUFuseNestedLoops fails), so those run unflattened
        FLATTEN=cfg.flatten and hooks.epilogue == EPI_STORE,
        DEVICE_EPOCH=hooks.epoch_cell is not None, OWN_A=hooks.own_a is not None,
        WIDE=wide or offsets.wide(a, b, c) or _rows_reach(M, seg_rows, cfg.block_m)
        >= offsets.INT32_SPAN,
        num_warps=cfg.num_warps, num_stages=cfg.num_stages,
    )
    static = (
        (num_programs(cfg, c.device, num_tiles),),
        cdiv(N, cfg.block_n),
        cdiv(max(seg_rows, 1), cfg.block_m),
        tma_b, c_tma, kwargs,
    )
    _STATIC.put(key, static)
    return static


def _rows_reach(M: int, seg_rows: int, block_m: int) -> int:
    """One past the last row a tile of the segmented tiling covers (``row0 + i`` in the
    kernel reaches it less one: int32 wraps from 2**31)."""
    seg_rows = max(seg_rows, 1)
    segments = max(1, cdiv(M, seg_rows)) if seg_rows < M else 1
    return (segments - 1) * seg_rows + cdiv(seg_rows, block_m) * block_m


def _check_operands(a, b, c, M: int, seg_rows: int, hooks: GemmHooks) -> None:
    """Raise ``ValueError`` unless the shapes fit :func:`gemm_launch`'s contract: 2-D
    operands, ``a``'s K columns equal to ``b``'s rows, ``M`` rows of a local ``a``, ``c``
    with ``b``'s ``N`` columns and the rows the epilogue stores (``M``, or one segment's for
    the reduce-scatter), ``seg_rows >= 1``, ``a`` and ``b`` of one dtype in :data:`DTYPES`:
    the kernel has no bounds but these, so a smaller tensor is read or written past its
    end, silently."""
    if a.dim() != 2 or b.dim() != 2 or c.dim() != 2:
        raise ValueError(f"launch_gemm: a, b and c must be 2-D, got {tuple(a.shape)}, "
                         f"{tuple(b.shape)}, {tuple(c.shape)}")
    K, N = b.shape
    if a.shape[1] != K:
        raise ValueError(f"launch_gemm: cannot multiply a {tuple(a.shape)} by b "
                         f"{tuple(b.shape)}")
    if a.dtype != b.dtype or a.dtype not in DTYPES:
        raise ValueError(f"launch_gemm: a and b must share a dtype among float16, bfloat16, "
                         f"float32, got {a.dtype} and {b.dtype}")
    if seg_rows < 1:
        raise ValueError(f"launch_gemm: seg_rows must be >= 1, got {seg_rows}")
    if not hooks.a_remote and a.shape[0] < M:
        raise ValueError(f"launch_gemm: a {tuple(a.shape)} has fewer than M = {M} rows")
    rows = min(seg_rows, M) if hooks.epilogue == EPI_REDUCE_SCATTER else M
    if c.shape[1] != N or c.shape[0] < rows:
        raise ValueError(f"launch_gemm: c must be [{rows}, {N}] (at least {rows} rows), got "
                         f"{tuple(c.shape)}")


def _interpreted() -> bool:
    # Triton 3.6's interpreter computes 16-bit float dots wrongly (no NumPy bf16); the
    # CPU backend upcasts the operands to fp32 first (exact: products of 16-bit floats).
    from ..runtime import interpret

    return interpret.active()


_LOCAL_CONTEXTS: dict = {}
_ORDERS: dict = {}


def _local_context(device: torch.device):
    """A context for GEMMs that touch no peer (usable without ``ditron.init``); cached per
    device (the kernel never writes it: no waits without a runtime context)."""
    from ..language.context import DIAG_WORDS, DeviceContext

    ctx = _LOCAL_CONTEXTS.get(device)
    if ctx is None:
        bases = torch.zeros(1, dtype=torch.int64, device=device)
        diag = torch.zeros(DIAG_WORDS, dtype=torch.int64, device=device)
        ctx = _LOCAL_CONTEXTS[device] = DeviceContext(bases, 0, 1, diag, 0)
    return ctx


def cached_linear_order(M: int, N: int, cfg: GemmConfig, device: torch.device) -> torch.Tensor:
    """The grouped tile order of a plain ``M x N`` GEMM on ``device``, built once per
    (shape, blocks, group, device)."""
    from .swizzle import linear_order

    key = (cdiv(M, cfg.block_m), cdiv(N, cfg.block_n), cfg.group_m, device)
    order = _ORDERS.get(key)
    if order is None:
        if len(_ORDERS) >= 256:
            _ORDERS.clear()
        order = _ORDERS[key] = linear_order(key[0], key[1], cfg.group_m).to(device)
    return order


def matmul(a: torch.Tensor, b: torch.Tensor, cfg: GemmConfig | None = None,
           order: torch.Tensor | None = None, use_tma: bool | None = None) -> torch.Tensor:
    """Local ``a @ b`` with the persistent GEMM (``torch.matmul`` equivalent, fp32 accum):
    2-D ``a`` and ``b`` of one dtype (float16, bfloat16 or float32) on one device.
    ``order``: the tile order (int32 or int64 tile ids on ``a``'s device, a permutation
    of every tile of ``cfg``'s tiling, checked where it is on the CPU: on a GPU that would
    read it on the host; default the grouped order)."""
    if a.dim() != 2 or b.dim() != 2 or a.shape[1] != b.shape[0]:
        raise ValueError(f"matmul: cannot multiply {tuple(a.shape)} by {tuple(b.shape)}")
    if a.dtype != b.dtype or a.dtype not in DTYPES or a.device != b.device:
        raise ValueError(f"matmul: a and b must share a dtype among float16, bfloat16, "
                         f"float32 and a device, got {a.dtype} on {a.device} and {b.dtype} on "
                         f"{b.device}")
    cfg = cfg or default_config(a.device, a.dtype, (a, b))
    M = a.shape[0]
    N = b.shape[1]
    c = torch.empty((M, N), dtype=a.dtype, device=a.device)
    if M == 0 or N == 0:
        return c
    if order is None:
        order = cached_linear_order(M, N, cfg, a.device)
    else:
        _check_order(order, cdiv(M, cfg.block_m) * cdiv(N, cfg.block_n), cfg)
        order = order.contiguous()  # the kernel reads slot i at element i
    launch_gemm(a, b, c, M, order=order, seg_rows=M, cfg=cfg, use_tma=use_tma)
    return c


def _check_order(order: torch.Tensor, tiles: int, cfg: GemmConfig) -> None:
    """``ValueError`` unless ``order`` holds ``tiles`` ids, each tile once where it is on the
    CPU (a repeated id leaves another tile unwritten, an id outside ``[0, tiles)`` stores
    outside ``c``: a negative one before it)."""
    ids = order.tolist() if order.device.type == "cpu" and order.dim() == 1 else None
    if order.numel() != tiles or ids is not None and sorted(ids) != list(range(tiles)):
        shown = "" if ids is None else f": {ids if len(ids) <= 9 else ids[:9] + ['...']}"
        raise ValueError(f"matmul: order must list each of the {tiles} tiles of "
                         f"{cfg.block_m} x {cfg.block_n} once, got {order.numel()} "
                         f"ids{shown}")
