"""Grouped GEMMs: rows grouped by expert, one weight matrix per group (mixture of experts).

:func:`grouped_gemm`: ``out[o[g]:o[g+1]] = x[o[g]:o[g+1]] @ w[g]`` for every group ``g < G``;
:func:`grouped_gemm_wgrad` (the weight gradient): ``dw[g] = x[o[g]:o[g+1]].T @ dy[o[g]:o[g+1]]``.
Both accumulate in fp32,
where ``o = offsets`` is an integer tensor ``[G + 1]`` on the device, non-decreasing. The
offsets may be computed on the device (MoE routing): the launch reads no count on the host,
so it can be captured in a CUDA graph and replayed with new routing. Rows outside
``[o[0], o[G])`` are not written.

Grid: ``row-tile slots x column tiles`` programs in grouped order (``group_m`` slots sweep
the column tiles together, for L2 reuse). Row-tile slot ``t`` belongs to the group whose tiles
cover it: a program loads the ``G`` groups' offsets as one vector, takes the running sum of
their tile counts ``cdiv(o[g+1] - o[g], BLOCK_M)`` and returns at once when ``t`` lies past
the last tile. ``sum_g cdiv(n_g, BM) <= cdiv(R, BM) + G`` for ``R`` rows, so
``cdiv(R, BM) + G`` slots always suffice. A tile never crosses a group boundary (its rows
are masked at the group's end).

CPU backend: operands are upcast to fp32 before ``tl.dot`` (the interpreter's 16-bit dot is
wrong in triton 3.6), as in the persistent GEMM.

Load paths: through pointers (masked), or, on CUDA capability >= 9 (``tma_wanted``; the CPU
backend's interpreter with ``DITRON_GEMM_TMA=1``) when the operands meet the TMA rules,
through host TMA descriptors (``GroupedGemmConfig.tma``): ``x``'s on ``[R, K]``, ``w``'s on
the stacked ``[G * K, N]`` (or, for a transposed 16-bit weight, ``[G * N, K]``, each loaded
block transposed: ``descriptors.transposable``). A tile's rows past its group's end load
the next group's rows (masked at the store); for the ``[G * K, N]`` form ``K`` must be a
multiple of ``BLOCK_K`` so that a block never reads the next group's weight rows.

The weight gradient's grid is ``G * K tiles * N tiles`` programs, group by group, each
group's tiles of ``dw`` in grouped order (``group_m`` K tiles sweep the N tiles together);
program ``(g, kb, nb)`` loops over group ``g``'s rows in blocks of ``BLOCK_M`` (an empty
group stores zeros). With TMA loads (descriptors on row-major ``x`` and ``dy``; 16-bit
operands only, since ``x``'s blocks are transposed) it takes the group's whole blocks
through the descriptors, unmasked, and its last partial block through masked pointers.
"""

from __future__ import annotations

import dataclasses

import torch
import triton
import triton.language as tl

from ..runtime.grid_math import cdiv, next_power_of_2
from ..runtime.tensor_spans import elements_meet, shares_memory
from ..runtime.triton_launch import FastKernel
from .alignment import vector_loads
from .descriptors import describe, tma_wanted, transposable
from .offsets import INT32_SPAN
from .tile_config import check_tile_config

#: the dtypes the kernels compute in (``x`` and ``w`` share one)
DTYPES = (torch.float16, torch.bfloat16, torch.float32)


@dataclasses.dataclass(frozen=True)
class GroupedGemmConfig:
    """Tile shape and launch options of the grouped GEMM."""

    block_m: int = 128
    block_n: int = 256
    block_k: int = 64
    num_warps: int = 8
    num_stages: int = 3
    #: row slots (the weight gradient: K tiles) that sweep the column tiles together (L2
    #: reuse)
    group_m: int = 8
    #: load through TMA descriptors where the device and operands allow (module docstring)
    tma: bool = True

    def __post_init__(self) -> None:
        check_tile_config(self)


#: average rows per group up to which the forward kernel takes 64 x 128 tiles with pointer
#: loads (decoding and small batches: a 128-row TMA box mostly loads other groups' rows)
SMALL_GROUP_ROWS = 128


def default_config(device: torch.device, dtype: torch.dtype,
                   rows_per_group: float | None = None,
                   operands: tuple[torch.Tensor, torch.Tensor] | None = None
                   ) -> GroupedGemmConfig:
    """The tile config for ``rows_per_group`` average rows per group (``None``: many).

    On a GPU, fp16 / bf16: 128 x 256 x 64 tiles, 3 stages, 8 warps, TMA loads (the fastest
    on REFERENCES.md's MoE shapes at 8192 tokens on an H200, sessions 42 and 44); up to
    :data:`SMALL_GROUP_ROWS` rows per group, 64 x 128 x 64, 4 stages, 4 warps, pointer
    loads (the fastest at 128 and 1024 tokens, 1.0-1.6x the large tiles, session 45:
    ``docs/perf.md``). fp32, whose tiles are twice the bytes: 128 x 128 x 32. So do
    ``operands`` (``(x, w)``, when given) whose loads would go through pointers that cannot
    be vectorized (``alignment.vector_loads``: e.g. ``K`` not a multiple of 16), and
    there 64 x 128 x 32 with 8 warps for few rows per group: the tiles above spill
    0.8-2.6 KB per thread there (ptxas, sm_90a, session 55), these none, and run 2.7-3.1x
    faster (an H200 at K = 7172, session 56; still 1.8-2.2x ``torch.bmm``'s time). On the CPU
    backend 64 x 64 x 32, where a program is a NumPy call and larger tiles mean fewer of
    them."""
    if device.type != "cuda":
        return _CPU
    if dtype == torch.float32:
        return _FP32
    small = rows_per_group is not None and rows_per_group <= SMALL_GROUP_ROWS
    cfg = _SMALL_GROUPS if small else _LARGE
    if operands is not None and _scalar_loads(*operands, cfg, device):
        return _SCALAR_SMALL if small else _SCALAR
    return cfg


def _scalar_loads(x: torch.Tensor, w: torch.Tensor, cfg: GroupedGemmConfig,
                  device: torch.device) -> bool:
    """Whether ``cfg`` would load ``x`` or ``w`` through pointer loads that cannot be
    vectorized."""
    if vector_loads(x) and vector_loads(w):
        return False
    return not (cfg.tma and tma_wanted(device) and _descriptors(x, w, cfg) is not None)


def default_wgrad_config(device: torch.device, dtype: torch.dtype) -> GroupedGemmConfig:
    """The weight gradient's tile config: on a GPU, fp16 / bf16, 128 x 256 tiles of ``dw``
    over 64-row steps, 8 warps, 4 stages, TMA loads (1.05-1.35x faster than pointer loads on
    REFERENCES.md's MoE shapes at 8192 tokens on an H200, session 46); otherwise
    :func:`default_config`'s."""
    if device.type == "cuda" and dtype != torch.float32:
        return _WGRAD_CONFIG
    return default_config(device, dtype)


# the defaults, made once (a frozen dataclass costs microseconds to build, per call)
_CPU = GroupedGemmConfig(64, 64, 32, num_warps=4, num_stages=1)
_FP32 = GroupedGemmConfig(128, 128, 32, num_warps=8, num_stages=3)
_SMALL_GROUPS = GroupedGemmConfig(64, 128, 64, num_warps=4, num_stages=4, tma=False)
#: unvectorized pointer loads (default_config)
_SCALAR = _FP32
_SCALAR_SMALL = GroupedGemmConfig(64, 128, 32, num_warps=8, num_stages=4, tma=False)
_LARGE = GroupedGemmConfig()
_WGRAD_CONFIG = GroupedGemmConfig(128, 256, 64, num_warps=8, num_stages=4, tma=True)


@triton.jit
def _grouped_gemm_kernel(x, w, out, offsets, G, N, K, slots,
                         sx_m, sx_k, sw_g, sw_k, sw_n, so_m, so_n,
                         BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                         GROUP_M: tl.constexpr, DOT_PRECISION: tl.constexpr,
                         UPCAST: tl.constexpr, GB: tl.constexpr,
                         USE_TMA: tl.constexpr = False,
                         B_NK: tl.constexpr = False):
    # grouped order: GROUP_M neighbouring row slots sweep the column tiles together, so
    # their rows (and the expert's columns) are reused from L2
    pid = tl.program_id(0)
    n_tiles = tl.cdiv(N, BLOCK_N)
    band = pid // (GROUP_M * n_tiles)
    first = band * GROUP_M
    rows_in_band = tl.minimum(slots - first, GROUP_M)
    slot = first + (pid % (GROUP_M * n_tiles)) % rows_in_band
    pid_n = (pid % (GROUP_M * n_tiles)) // rows_in_band
    # the slot's group: the first whose running tile count passes the slot (all groups'
    # offsets in one vector load; G <= GB)
    gs = tl.arange(0, GB)
    lo = tl.load(offsets + gs, mask=gs < G, other=0).to(tl.int32)
    hi = tl.load(offsets + gs + 1, mask=gs < G, other=0).to(tl.int32)
    tiles = tl.cdiv(hi - lo, BLOCK_M)
    ends = tl.cumsum(tiles, 0)
    group = tl.sum((ends <= slot).to(tl.int32))
    mine = gs == group
    row0 = tl.sum(tl.where(mine, lo + (slot - ends + tiles) * BLOCK_M, 0))
    row_end = tl.sum(tl.where(mine, hi, 0))
    if group < G:
        rows = row0 + tl.arange(0, BLOCK_M)
        cols = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
        ks = tl.arange(0, BLOCK_K)
        row_ok = rows < row_end
        col_ok = cols < N
        if not USE_TMA:
            x_ptrs = (x + rows.to(tl.int64)[:, None] * sx_m
                      + ks[None, :].to(tl.int64) * sx_k)
            w_ptrs = (w + group.to(tl.int64) * sw_g + ks[:, None].to(tl.int64) * sw_k
                      + cols[None, :].to(tl.int64) * sw_n)
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for k0 in range(0, K, BLOCK_K):
            if USE_TMA:
                a = x.load([row0, k0])
                if B_NK:
                    b = w.load([group * N + pid_n * BLOCK_N, k0]).T
                else:
                    b = w.load([group * K + k0, pid_n * BLOCK_N])
            else:
                k_ok = ks < K - k0
                a = tl.load(x_ptrs, mask=row_ok[:, None] & k_ok[None, :], other=0.0)
                b = tl.load(w_ptrs, mask=k_ok[:, None] & col_ok[None, :], other=0.0)
                # int64 steps: a K stride past 2**31 / BLOCK_K (a column-major x of over
                # 2**31 / BLOCK_K rows) wrapped the int32 product
                x_ptrs += BLOCK_K * tl.cast(sx_k, tl.int64)
                w_ptrs += BLOCK_K * tl.cast(sw_k, tl.int64)
            if UPCAST:
                acc = tl.dot(a.to(tl.float32), b.to(tl.float32), acc,
                             input_precision=DOT_PRECISION)
            else:
                acc = tl.dot(a, b, acc, input_precision=DOT_PRECISION)
        o_ptrs = out + rows.to(tl.int64)[:, None] * so_m + cols.to(tl.int64)[None, :] * so_n
        tl.store(o_ptrs, acc.to(out.dtype.element_ty), mask=row_ok[:, None] & col_ok[None, :])


@triton.jit
def _grouped_wgrad_kernel(x, dy, dw, offsets, K, N, sx_m, sx_k, sd_m, sd_n, sw_g, sw_k, sw_n,
                          x_desc, dy_desc,
                          BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                          DOT_PRECISION: tl.constexpr, UPCAST: tl.constexpr,
                          GROUP_K: tl.constexpr, USE_TMA: tl.constexpr = False):
    # a group's tiles of dw in grouped order, GROUP_K neighbouring K tiles sweeping the N
    # tiles together, as the forward kernel's row slots (no faster than K tiles first on
    # an H200: the L2 served both, docs/perf.md session 46)
    k_tiles = tl.cdiv(K, BLOCK_K)
    n_tiles = tl.cdiv(N, BLOCK_N)
    pid = tl.program_id(0)
    group = pid // (k_tiles * n_tiles)
    tile = pid % (k_tiles * n_tiles)
    first = tile // (GROUP_K * n_tiles) * GROUP_K
    band_k = tl.minimum(k_tiles - first, GROUP_K)
    kb = first + (tile % (GROUP_K * n_tiles)) % band_k
    pid_n = (tile % (GROUP_K * n_tiles)) // band_k
    lo = tl.load(offsets + group).to(tl.int32)
    hi = tl.load(offsets + group + 1).to(tl.int32)
    ks = kb * BLOCK_K + tl.arange(0, BLOCK_K)
    cols = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    ms = tl.arange(0, BLOCK_M)
    k_ok = ks < K
    col_ok = cols < N
    # int64 column offsets, once per program: x's, dy's or dw's may pass 2**31 (a
    # column-major x of R * K elements)
    x_cols = ks[:, None].to(tl.int64) * sx_k
    dy_cols = cols[None, :].to(tl.int64) * sd_n
    acc = tl.zeros((BLOCK_K, BLOCK_N), dtype=tl.float32)
    tail = lo
    if USE_TMA:
        # the group's whole blocks of rows through descriptors (no row mask: a block never
        # reaches the next group), the last partial block through masked pointers below
        tail = lo + (hi - lo) // BLOCK_M * BLOCK_M
        for m0 in range(lo, tail, BLOCK_M):
            a = x_desc.load([m0, kb * BLOCK_K]).T  # [BK, BM]
            b = dy_desc.load([m0, pid_n * BLOCK_N])
            if UPCAST:
                acc = tl.dot(a.to(tl.float32), b.to(tl.float32), acc,
                             input_precision=DOT_PRECISION)
            else:
                acc = tl.dot(a, b, acc, input_precision=DOT_PRECISION)
    for m0 in range(tail, hi, BLOCK_M):
        rows = m0 + ms
        row_ok = rows < hi
        a = tl.load(x + rows.to(tl.int64)[None, :] * sx_m + x_cols,
                    mask=k_ok[:, None] & row_ok[None, :], other=0.0)  # [BK, BM]: x rows, T
        b = tl.load(dy + rows.to(tl.int64)[:, None] * sd_m + dy_cols,
                    mask=row_ok[:, None] & col_ok[None, :], other=0.0)
        if UPCAST:
            acc = tl.dot(a.to(tl.float32), b.to(tl.float32), acc, input_precision=DOT_PRECISION)
        else:
            acc = tl.dot(a, b, acc, input_precision=DOT_PRECISION)
    d_ptrs = (dw + group.to(tl.int64) * sw_g + ks[:, None].to(tl.int64) * sw_k
              + cols[None, :].to(tl.int64) * sw_n)
    tl.store(d_ptrs, acc.to(dw.dtype.element_ty), mask=k_ok[:, None] & col_ok[None, :])


_GROUPED = FastKernel(_grouped_gemm_kernel)
_WGRAD = FastKernel(_grouped_wgrad_kernel)


def check_grouped(op: str, x: torch.Tensor, w: torch.Tensor, offsets: torch.Tensor) -> None:
    """Raise ``ValueError`` unless ``x [R, K]``, ``w [G, K, N]`` and ``offsets [G + 1]``
    fit together (shapes, dtypes, devices; the offsets' values ``0 <= o[0] <= ... <= o[G]
    <= R`` where they are on the CPU: on a GPU reading them would synchronise the host)."""
    if x.dim() != 2 or w.dim() != 3 or x.shape[1] != w.shape[1]:
        raise ValueError(f"{op}: need x [R, K] and w [G, K, N], got x {tuple(x.shape)} and "
                         f"w {tuple(w.shape)}")
    if x.dtype != w.dtype or x.dtype not in DTYPES:
        raise ValueError(f"{op}: x and w must share a dtype among float16, bfloat16, "
                         f"float32; got {x.dtype} and {w.dtype}")
    if offsets.shape != (w.shape[0] + 1,) or offsets.dtype.is_floating_point \
            or offsets.dtype == torch.bool:
        raise ValueError(f"{op}: offsets must be an integer tensor [G + 1] = "
                         f"[{w.shape[0] + 1}], got {tuple(offsets.shape)} {offsets.dtype}")
    if not (x.device == w.device == offsets.device):
        raise ValueError(f"{op}: x, w and offsets must be on one device, got {x.device}, "
                         f"{w.device}, {offsets.device}")
    if offsets.device.type == "cpu" and offsets.numel():
        o = offsets.tolist()
        if o[0] < 0 or o[-1] > x.shape[0] or any(p > q for p, q in zip(o, o[1:], strict=False)):
            raise ValueError(f"{op}: offsets must rise from >= 0 to <= R = {x.shape[0]} "
                             f"(the rows of x), got {o if len(o) <= 9 else o[:9] + ['...']}")


def check_rows(op: str, rows: int, block: int) -> None:
    """Raise ``ValueError`` unless ``rows`` rows of ``x`` can be numbered in int32 by the
    kernels, whose row blocks of ``block`` rows start below ``rows`` and end at most
    ``block - 1`` rows past them (a block's row ``rows + block - 2`` wrapped to a negative
    one: a read and a store before ``x`` and ``out``; the weight gradient's row loop did not
    end)."""
    if rows + block > INT32_SPAN:
        raise ValueError(f"{op}: x has {rows} rows; the kernels number rows in int32 and "
                         f"take blocks of {block}, so at most {INT32_SPAN - block}: split "
                         f"the rows")


def _check_apart(op: str, out: torch.Tensor, **operands: torch.Tensor) -> None:
    """``ValueError`` unless ``out``'s elements are distinct and apart from every operand's
    (interleaved with them is fine): tiles are written while other tiles still read the
    operands, and writes through elements that share memory race."""
    if shares_memory(out):
        raise ValueError(f"{op}: out has elements that share memory (strides {out.stride()} "
                         f"for shape {tuple(out.shape)}); pass a tensor whose elements are "
                         f"distinct")
    for name, t in operands.items():
        if elements_meet(out, t):
            raise ValueError(f"{op}: out overlaps {name} in memory; pass an out of its own")


def grouped_gemm(x: torch.Tensor, w: torch.Tensor, offsets: torch.Tensor, *,
                 out: torch.Tensor | None = None,
                 config: GroupedGemmConfig | None = None,
                 rows_per_group: float | None = None) -> torch.Tensor:
    """``out[o[g]:o[g+1]] = x[o[g]:o[g+1]] @ w[g]`` (see the module docstring).

    ``x [R, K]`` and ``w [G, K, N]`` with any strides (``w`` may be a transposed
    ``[G, N, K]`` weight), one dtype; ``offsets [G + 1]`` integer (any stride), on the
    same device, with ``0 <= o[0] <= ... <= o[G] <= R`` (checked on the CPU only: on a
    GPU that would read them on the host).
    Returns ``out [R, N]`` (new, or the given one: its elements distinct and apart from
    the operands', ``ValueError`` otherwise); rows outside ``[o[0], o[G])`` keep their
    contents. ``rows_per_group``: the expected average rows per group, which picks
    :func:`default_config` when ``config`` is ``None`` (default ``R / G``, too many where
    ``x`` holds spare capacity rows, as a dispatch's does). A local kernel: no
    ``ditron.init`` needed.
    """
    from ..runtime import interpret

    check_grouped("grouped_gemm", x, w, offsets)
    offsets = offsets.contiguous()  # the kernel reads them as one vector
    R, K = x.shape
    G, _, N = w.shape
    cfg = config or default_config(x.device, x.dtype,
                                   R / max(G, 1) if rows_per_group is None else rows_per_group,
                                   (x, w))
    check_rows("grouped_gemm", R, cfg.block_m)
    if out is None:
        out = torch.empty((R, N), dtype=x.dtype, device=x.device)
    elif out.shape != (R, N) or out.dtype != x.dtype or out.device != x.device:
        raise ValueError(f"grouped_gemm: out must be [{R}, {N}] {x.dtype} on {x.device}, got "
                         f"{tuple(out.shape)} {out.dtype} on {out.device}")
    else:
        _check_apart("grouped_gemm", out, x=x, w=w, offsets=offsets)
    if R == 0 or N == 0 or G == 0:
        return out
    slots = cdiv(R, cfg.block_m) + G
    grid = (slots * cdiv(N, cfg.block_n),)
    descs = _descriptors(x, w, cfg) if cfg.tma and K > 0 and tma_wanted(x.device) else None
    x_arg, w_arg = (x, w) if descs is None else descs[:2]
    _GROUPED[grid](
        x_arg, w_arg, out, offsets, G, N, K, slots, x.stride(0), x.stride(1), w.stride(0),
        w.stride(1), w.stride(2), out.stride(0), out.stride(1),
        BLOCK_M=cfg.block_m, BLOCK_N=cfg.block_n, BLOCK_K=cfg.block_k, GROUP_M=cfg.group_m,
        DOT_PRECISION="ieee" if x.dtype == torch.float32 else "tf32",
        UPCAST=interpret.active(), GB=next_power_of_2(G), USE_TMA=descs is not None,
        B_NK=descs is not None and descs[2], num_warps=cfg.num_warps,
        num_stages=cfg.num_stages)
    return out


def _descriptors(x: torch.Tensor, w: torch.Tensor, cfg: GroupedGemmConfig):
    """``(x's descriptor, w's, whether w's is on [G * N, K])``, or ``None`` where the
    operands break the TMA rules (module docstring), or the stacked weight's rows (``G *
    K``, ``G * N``) pass 2**31: the kernel's coordinates ``group * K + k`` are int32 (TMA
    takes no others), and wrapped there."""
    G, K, N = w.shape
    bm, bn, bk = cfg.block_m, cfg.block_n, cfg.block_k
    xd = describe(x, (bm, bk))
    if xd is None or xd[1]:
        return None
    if w.stride(2) == 1 and w.stride(0) == K * w.stride(1) and K % bk == 0 \
            and G * K <= INT32_SPAN:
        wd = describe(w.as_strided((G * K, N), (w.stride(1), 1)), (bk, bn))
        return None if wd is None or wd[1] else (xd[0], wd[0], False)
    if w.stride(1) == 1 and w.stride(0) == N * w.stride(2) and transposable(w.dtype) \
            and G * N <= INT32_SPAN:
        wd = describe(w.as_strided((G * N, K), (w.stride(2), 1)), (bn, bk))
        return None if wd is None or wd[1] else (xd[0], wd[0], True)
    return None


def grouped_gemm_wgrad(x: torch.Tensor, dy: torch.Tensor, offsets: torch.Tensor, *,
                       out: torch.Tensor | None = None,
                       config: GroupedGemmConfig | None = None) -> torch.Tensor:
    """``dw[g] = x[o[g]:o[g+1]].T @ dy[o[g]:o[g+1]]`` for ``x [R, K]``, ``dy [R, N]`` (any
    strides, one dtype) and ``offsets = o [G + 1]`` as in :func:`grouped_gemm`. Returns
    ``dw [G, K, N]`` in ``x``'s dtype (zeros for an empty group): new, or ``out``, whose
    elements must be distinct and apart from the operands' (``ValueError`` otherwise)."""
    from ..runtime import interpret

    G = offsets.shape[0] - 1 if offsets.dim() == 1 else -1
    if dy.dim() != 2 or dy.shape[0] != x.shape[0]:
        raise ValueError(f"grouped_gemm_wgrad: need dy [R, N] with x's {x.shape[0]} rows, got "
                         f"{tuple(dy.shape)}")
    N = dy.shape[1]
    if dy.dtype != x.dtype or dy.device != x.device:
        raise ValueError(f"grouped_gemm_wgrad: dy must be {x.dtype} on {x.device}, got "
                         f"{dy.dtype} on {dy.device}")
    # the weight check_grouped sees: dw's shape, dy's dtype and device, no memory (an
    # allocated one took dw's size again, beside a given out)
    check_grouped("grouped_gemm_wgrad", x,
                  dy.new_empty((1, 1, 1)).expand(max(G, 0), x.shape[-1], N), offsets)
    offsets = offsets.contiguous()  # the kernel reads o[g], o[g + 1] side by side
    K = x.shape[1]
    cfg = config or default_wgrad_config(x.device, x.dtype)
    check_rows("grouped_gemm_wgrad", x.shape[0], cfg.block_k)  # its row steps: block_k
    if out is None:
        out = torch.empty((G, K, N), dtype=x.dtype, device=x.device)
    elif out.shape != (G, K, N) or out.dtype != x.dtype or out.device != x.device:
        raise ValueError(f"grouped_gemm_wgrad: out must be [{G}, {K}, {N}] {x.dtype} on "
                         f"{x.device}, got {tuple(out.shape)} {out.dtype} on {out.device}")
    else:
        _check_apart("grouped_gemm_wgrad", out, x=x, dy=dy, offsets=offsets)
    if out.numel() == 0:
        return out
    grid = (G * cdiv(K, cfg.block_m) * cdiv(N, cfg.block_n),)
    descs = (_wgrad_descriptors(x, dy, cfg) if cfg.tma and x.shape[0] > 0
             and tma_wanted(x.device) and transposable(x.dtype) else None)
    x_desc, dy_desc = (x, dy) if descs is None else descs
    _WGRAD[grid](
        x, dy, out, offsets, K, N, x.stride(0), x.stride(1), dy.stride(0), dy.stride(1),
        out.stride(0), out.stride(1), out.stride(2), x_desc, dy_desc,
        BLOCK_M=cfg.block_k, BLOCK_N=cfg.block_n, BLOCK_K=cfg.block_m,
        DOT_PRECISION="ieee" if x.dtype == torch.float32 else "tf32",
        UPCAST=interpret.active(), GROUP_K=cfg.group_m, USE_TMA=descs is not None,
        num_warps=cfg.num_warps, num_stages=cfg.num_stages)
    return out


def _wgrad_descriptors(x: torch.Tensor, dy: torch.Tensor, cfg: GroupedGemmConfig):
    """Descriptors of row-major ``x`` (``[block_k rows, block_m]`` boxes) and ``dy``
    (``[block_k rows, block_n]``) for the weight gradient, or ``None``."""
    xd = describe(x, (cfg.block_k, cfg.block_m))
    dd = describe(dy, (cfg.block_k, cfg.block_n))
    if xd is None or dd is None or xd[1] or dd[1]:
        return None
    return xd[0], dd[0]
