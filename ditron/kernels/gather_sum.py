"""Weighted gather-sum: ``out[t] = sum_j w[t, j] * src[idx[t, j]]`` (the MoE combine's sum),
and its weights' gradient, the gather-dot ``dw[t, j] = <g[t], src[idx[t, j]]>``.

``src [R, N]`` floating, ``idx [T, k]`` integer row indices into ``src`` (``-1``: no row,
counts zero; below ``R``, which is not checked: that would read them on the host), ``w [T,
k]`` floating or ``None`` (weight 1), all on one device (``ValueError`` otherwise); fp32
accumulation (float64 for float64 rows: :func:`acc_type`), ``out [T, N]`` in ``src``'s
dtype. A second source ``src2`` with its own index ``idx2`` may supply the rows ``idx``
leaves out (``src2[idx2[t, j]]`` where ``idx[t, j] < 0 <= idx2[t, j]``): the combine reads
peers' rows from an inbox and its own from its experts' output.

One pass: each program gathers the ``k`` rows of a block of tokens and sums them in
registers, where a torch formulation writes and rereads ``[T, k, N]`` fp32 intermediates.
The sum adds the copies' ``[BLOCK_T, BLOCK_N]`` tiles one after another (an unrolled
loop); the dot loads all ``k`` at once, a ``[BLOCK_T, KB, BLOCK_N]`` tile (fewer registers
than an unrolled loop's, which spilled at 8 copies; 1.06-2.2x faster on an H200). Both
pick their tiles from the shapes alone, the same on every backend, so the CPU compile check
sees the GPU's launches (``tools/cuda_compile_check.py``: these kernels must not spill).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from ..runtime.grid_math import cdiv, next_power_of_2
from ..runtime.integers import check_int
from ..runtime.triton_launch import FastKernel


@triton.jit
def _gathered(src, idx, src2, idx2, ts, t_ok, cols, col_ok, j, s_src, s_src2,
              K: tl.constexpr, TWO: tl.constexpr, ACC: tl.constexpr):
    """``(rows, ok)``: the ``[BLOCK_T, BLOCK_N]`` tile (in ``ACC``, fp32 or fp64) of copy
    ``j``'s rows of tokens ``ts`` (``src[idx]``, else ``src2[idx2]``, else zero), and which
    tokens have one."""
    rows = tl.load(idx + ts.to(tl.int64) * K + j, mask=t_ok, other=-1)
    ok = rows >= 0
    v = tl.load(src + rows.to(tl.int64)[:, None] * s_src + cols[None, :],
                mask=ok[:, None] & col_ok[None, :], other=0.0).to(ACC)
    if TWO:
        rows2 = tl.load(idx2 + ts.to(tl.int64) * K + j, mask=t_ok & ~ok, other=-1)
        ok2 = rows2 >= 0
        v += tl.load(src2 + rows2.to(tl.int64)[:, None] * s_src2 + cols[None, :],
                     mask=ok2[:, None] & col_ok[None, :], other=0.0).to(ACC)
        ok = ok | ok2
    return v, ok


@triton.jit
def _gather_sum_kernel(src, idx, src2, idx2, weights, out, T, N, s_src, s_src2, s_out,
                       K: tl.constexpr, HAS_W: tl.constexpr, TWO: tl.constexpr,
                       BLOCK_T: tl.constexpr, BLOCK_N: tl.constexpr,
                       ACC: tl.constexpr = tl.float32):
    ts = tl.program_id(0) * BLOCK_T + tl.arange(0, BLOCK_T)
    cols = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    t_ok = ts < T
    col_ok = cols < N
    acc = tl.zeros((BLOCK_T, BLOCK_N), dtype=ACC)
    for j in tl.static_range(K):
        v, ok = _gathered(src, idx, src2, idx2, ts, t_ok, cols, col_ok, j, s_src, s_src2, K,
                          TWO, ACC)
        if HAS_W:
            wj = tl.load(weights + ts.to(tl.int64) * K + j, mask=t_ok & ok, other=0.0)
            v = v * wj.to(ACC)[:, None]
        acc += v
    o_ptrs = out + ts.to(tl.int64)[:, None] * s_out + cols[None, :]
    tl.store(o_ptrs, acc.to(out.dtype.element_ty), mask=t_ok[:, None] & col_ok[None, :])


@triton.jit
def _copy_rows(idx, idx2, ts, t_ok, ks, K: tl.constexpr, TWO: tl.constexpr):
    """``(rows, rows2)``: ``[BLOCK_T, KB]`` int64, the row of copy ``ks`` of tokens ``ts``
    in ``src`` and, where it has none there, in ``src2`` (``-1``: none)."""
    at = ts.to(tl.int64)[:, None] * K + ks[None, :]
    live = t_ok[:, None] & (ks < K)[None, :]
    rows = tl.load(idx + at, mask=live, other=-1).to(tl.int64)
    rows2 = rows
    if TWO:
        rows2 = tl.load(idx2 + at, mask=live & (rows < 0), other=-1).to(tl.int64)
    return rows, rows2


@triton.jit
def _copies(src, src2, rows, rows2, cols, col_ok, s_src, s_src2, TWO: tl.constexpr,
            ACC: tl.constexpr):
    """``[BLOCK_T, KB, BLOCK_N]`` in ``ACC`` (fp32 or fp64): columns ``cols`` of every
    copy's row (zero where a copy has none); all of a token block's copies are loaded at
    once."""
    c = cols[None, None, :]
    v = tl.load(src + rows[:, :, None] * s_src + c,
                mask=(rows >= 0)[:, :, None] & col_ok[None, None, :], other=0.0)
    v = v.to(ACC)
    if TWO:
        v += tl.load(src2 + rows2[:, :, None] * s_src2 + c,
                     mask=(rows2 >= 0)[:, :, None] & col_ok[None, None, :],
                     other=0.0).to(ACC)
    return v


@triton.jit
def _gather_dot_kernel(src, idx, src2, idx2, g, out, T, N, s_src, s_src2, s_g, per_slice,
                       K: tl.constexpr, KB: tl.constexpr, TWO: tl.constexpr,
                       BLOCK_T: tl.constexpr, BLOCK_N: tl.constexpr,
                       ACC: tl.constexpr = tl.float32):
    """Program ``(p, s)``: the dot products of tokens block ``p`` over column slice ``s``
    (``per_slice`` blocks of ``BLOCK_N``), written to ``out[s]`` (``[slices, T, K]``)."""
    ts = tl.program_id(0) * BLOCK_T + tl.arange(0, BLOCK_T)
    t_ok = ts < T
    ks = tl.arange(0, KB)
    rows, rows2 = _copy_rows(idx, idx2, ts, t_ok, ks, K, TWO)
    acc = tl.zeros((BLOCK_T, KB), dtype=ACC)
    first = tl.program_id(1) * per_slice
    for c in range(first, tl.minimum(first + per_slice, tl.cdiv(N, BLOCK_N))):
        cols = c * BLOCK_N + tl.arange(0, BLOCK_N)
        col_ok = cols < N
        gt = tl.load(g + ts.to(tl.int64)[:, None] * s_g + cols[None, :],
                     mask=t_ok[:, None] & col_ok[None, :], other=0.0).to(ACC)
        v = _copies(src, src2, rows, rows2, cols, col_ok, s_src, s_src2, TWO, ACC)
        acc += tl.sum(v * gt[:, None, :], axis=2)
    out += tl.program_id(1).to(tl.int64) * T * K
    tl.store(out + ts.to(tl.int64)[:, None] * K + ks[None, :], acc.to(out.dtype.element_ty),
             mask=t_ok[:, None] & (ks < K)[None, :])


_GATHER_SUM = FastKernel(_gather_sum_kernel)
_GATHER_DOT = FastKernel(_gather_dot_kernel)


def _sources(op: str, src: torch.Tensor, idx: torch.Tensor, src2: torch.Tensor | None,
             idx2: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The gathered rows' arguments checked (``ValueError``) and as the kernels take them:
    ``(idx, src2, idx2)`` contiguous, ``src`` / ``idx`` standing in for an absent second
    source."""
    if src.dim() != 2 or idx.dim() != 2 or not _unit_rows(src):
        raise ValueError(f"{op}: need src [R, N] with contiguous rows and idx [T, k], got "
                         f"{tuple(src.shape)} (strides {src.stride()}) and {tuple(idx.shape)}")
    if not src.dtype.is_floating_point:
        raise ValueError(f"{op}: src must be floating, got {src.dtype}")
    _check_device(op, src, idx=idx, src2=src2, idx2=idx2)
    for name, index in (("idx", idx), ("idx2", idx2)):
        if index is not None and (index.dtype.is_floating_point or index.dtype.is_complex
                                  or index.dtype == torch.bool):
            raise ValueError(f"{op}: {name} must hold integer row indices, got {index.dtype}")
    two = src2 is not None
    if two != (idx2 is not None) or two and (
            src2.dim() != 2 or src2.shape[1] != src.shape[1] or not _unit_rows(src2)
            or src2.dtype != src.dtype or idx2.shape != idx.shape):
        raise ValueError(f"{op}: src2 and idx2 go together, src2 like src [R2, "
                         f"{src.shape[1]}] {src.dtype} with contiguous rows and idx2 "
                         f"{tuple(idx.shape)}")
    idx = idx.contiguous()
    return (idx, src2, idx2.contiguous()) if two else (idx, src, idx)


def _unit_rows(t: torch.Tensor) -> bool:
    """Whether the kernels can read ``t [rows, N]``'s rows as contiguous: stride 1 in dim
    1, or a stride that no read uses (rows of one element, or no elements: the gradient
    of ``out.sum()`` over zero tokens has strides ``(0, 0)``)."""
    return t.stride(1) == 1 or t.shape[1] <= 1 or t.numel() == 0


def _check_device(op: str, src: torch.Tensor, **tensors: torch.Tensor | None) -> None:
    """Raise ``ValueError`` unless each of ``tensors`` (``None``: absent) is on ``src``'s
    device (the kernels read them all; a launch does not check)."""
    for name, t in tensors.items():
        if t is not None and t.device != src.device:
            raise ValueError(f"{op}: {name} is on {t.device} and src on {src.device}; they "
                             f"must be on one device")


#: tokens per program of both kernels (the gather-sum takes :data:`SCALAR_SUM_BLOCK_T` on
#: rows whose loads do not vectorize)
BLOCK_T = 8
#: elements of the gather-sum's copy tiles of a program (``BLOCK_T x k x BLOCK_N``: its
#: unrolled loop keeps them all in flight) for 16-bit rows whose loads vectorize, at most
#: 256 columns; half of both for 32-bit rows (an H200, session 56: 8 x 128 fp32 tiles
#: 1.05-1.2x faster than 8 x 256)
SUM_TILE = 32768
#: the gather-sum's tiles for rows whose loads do not vectorize: 4 tokens, at most 64
#: columns, at most this many elements over the copies (an H200, session 56: 4 x 64 was the
#: fastest of 8 tile shapes on every such case, 1.5-1.8x faster than 8 x 256 or 8 x 128,
#: bf16 and fp32, k = 6-16)
SCALAR_SUM_TILE = 4096
SCALAR_SUM_BLOCK_T = 4
#: elements of the gather-dot's ``[BLOCK_T, KB, BLOCK_N]`` tile for 16-bit rows whose loads
#: vectorize; half for 32-bit rows, a quarter for loads that do not vectorize (sm_90a: 160
#: registers at 8 x 8 x 128 bf16; twice the elements spilled, as did fp32 or unvectorized
#: rows at this size)
DOT_TILE = 8192
#: the gather-dot's tokens per program for vectorized 16-bit rows of 16 copies or more, at
#: twice :data:`DOT_TILE` (sm_90a: 4 x 32 x 128 bf16, 239 registers, no spill, where 8 x 32
#: x 128 spilled 1.1 KB, as did fp32 at 4 x 16 x 128; an H200, session 56: 4 x 128
#: 1.1-1.45x faster than 8 x 64 / 8 x 32 at k = 16-32)
DOT_WIDE_BLOCK_T = 4


def _blocks(tile: int, N: int, k: int, widest: int,
            block_t: int = BLOCK_T) -> tuple[int, int]:
    """``(block_t, BLOCK_N)``: column blocks of at most ``widest`` (and ``N``) columns,
    with ``block_t x KB x BLOCK_N`` at most ``tile`` elements (``KB``: ``k`` rounded up to
    a power of two) but 16 columns at least. Shapes alone decide, on every backend."""
    return block_t, min(next_power_of_2(N), widest,
                        max(16, tile // (block_t * next_power_of_2(k))))


def _sum_blocks(N: int, k: int, itemsize: int, aligned: bool) -> tuple[int, int]:
    """The gather-sum's ``(BLOCK_T, BLOCK_N)`` for rows of ``N`` elements of ``itemsize``
    bytes, ``k`` copies, loads vectorized or not (``aligned``)."""
    if not aligned:
        return _blocks(SCALAR_SUM_TILE, N, k, 64, SCALAR_SUM_BLOCK_T)
    wide = max(1, itemsize // 2)
    return _blocks(SUM_TILE // wide, N, k, 256 // wide)


def _dot_blocks(N: int, k: int, itemsize: int, aligned: bool) -> tuple[int, int]:
    """The gather-dot's ``(BLOCK_T, BLOCK_N)`` for rows of ``N`` elements of ``itemsize``
    bytes, ``k`` copies, loads vectorized or not (``aligned``)."""
    tile = DOT_TILE // max(1, itemsize // 2)
    if not aligned:
        return _blocks(tile // 4, N, k, 128)
    if itemsize <= 2 and next_power_of_2(k) >= 16:
        return _blocks(2 * tile, N, k, 128, DOT_WIDE_BLOCK_T)
    return _blocks(tile, N, k, 128)


def acc_type(dtype: torch.dtype) -> tl.dtype:
    """What both kernels multiply and sum rows of ``dtype`` in: float64 rows in float64
    (in fp32 they lost all but 24 bits of each row, silently), every other floating type
    in fp32."""
    return tl.float64 if dtype == torch.float64 else tl.float32


def _vectorizes(*rows: tuple[torch.Tensor, int]) -> bool:
    """Whether loads of rows ``(tensor, row stride)`` are 16-byte aligned vectors (Triton
    specializes addresses and integers by divisibility by 16)."""
    return all(t.data_ptr() % 16 == 0 and s % 16 == 0 for t, s in rows)


def weighted_gather_sum(src: torch.Tensor, idx: torch.Tensor,
                        weights: torch.Tensor | None = None, *,
                        src2: torch.Tensor | None = None,
                        idx2: torch.Tensor | None = None) -> torch.Tensor:
    """``out[t] = sum_j weights[t, j] * row(t, j)`` (see the module docstring): ``row`` is
    ``src[idx[t, j]]``, else ``src2[idx2[t, j]]`` (when both are given), else zero.
    Sources must have contiguous rows (stride 1 in dim 1; any stride where rows hold one
    element or none), the same ``N`` and dtype."""
    two = src2 is not None
    idx, src2, idx2 = _sources("weighted_gather_sum", src, idx, src2, idx2)
    if weights is not None and (weights.shape != idx.shape
                                or not weights.dtype.is_floating_point):
        raise ValueError(f"weighted_gather_sum: weights must be floating, of shape "
                         f"{tuple(idx.shape)}, got {tuple(weights.shape)} {weights.dtype}")
    _check_device("weighted_gather_sum", src, weights=weights)
    T, k = idx.shape
    N = src.shape[1]
    out = torch.empty((T, N), dtype=src.dtype, device=src.device)
    if out.numel() == 0:
        return out
    if k == 0:
        return out.zero_()
    w = idx if weights is None else weights.contiguous()
    # fp8 sums stored by this kernel were wrong in Triton 3.6's interpreter (1.998 -> 1.0,
    # -0.485 -> -0.25: a rounding carry into the exponent lost) and on an H100 too (10-18 of
    # 512 off by up to half; a plain fp32 -> fp8 cast kernel rounds as torch does there,
    # bench/results/2026-12-06-s69/s69k: cause not isolated): the kernel writes fp32 and
    # torch rounds. (bf16 sums round to nearest even on the CPU backend as on GPUs:
    # runtime/interpret.py patches the interpreter's casts.)
    sums = out if src.element_size() > 1 else \
        torch.empty((T, N), dtype=torch.float32, device=src.device)
    aligned = _vectorizes((src, src.stride(0)), (src2, src2.stride(0)), (sums, sums.stride(0)))
    block_t, block_n = _sum_blocks(N, k, src.element_size(), aligned)
    grid = (cdiv(T, block_t), cdiv(N, block_n))
    _GATHER_SUM[grid](src, idx, src2, idx2, w, sums, T, N, src.stride(0), src2.stride(0),
                      sums.stride(0), K=k, HAS_W=weights is not None, TWO=two,
                      BLOCK_T=block_t, BLOCK_N=block_n, ACC=acc_type(src.dtype),
                      num_warps=4)
    return out if sums is out else out.copy_(sums)


#: programs per SM :func:`gather_dot` aims for on a GPU (few tokens: the columns are cut
#: into slices, each summed by its own program, the slices' sums added in a fixed order)
DOT_PROGRAMS_PER_SM = 4


def _column_slices(device: torch.device, token_blocks: int, col_blocks: int) -> int:
    if device.type != "cuda":
        return 1
    sms = torch.cuda.get_device_properties(device).multi_processor_count
    return max(1, min(col_blocks, cdiv(DOT_PROGRAMS_PER_SM * sms, token_blocks)))


def gather_dot(src: torch.Tensor, idx: torch.Tensor, g: torch.Tensor, *,
               src2: torch.Tensor | None = None, idx2: torch.Tensor | None = None,
               slices: int | None = None) -> torch.Tensor:
    """``out[t, j] = <g[t], row(t, j)>`` in fp32, ``[T, k]`` (multiplied and summed in
    fp32, or in float64 for float64 ``src`` rows, rounded to fp32 once), rows as in
    :func:`weighted_gather_sum` (zero where a copy has none): the gradient of its weights,
    with ``g [T, N]`` the gradient of its output, read without materialising the rows.
    ``slices``: column slices summed apart, an int >= 1 (default: enough to fill a GPU,
    one on the CPU); the result does not depend on the launch, only on ``slices``."""
    two = src2 is not None
    idx, src2, idx2 = _sources("gather_dot", src, idx, src2, idx2)
    if slices is not None:  # a float made the partial sums' shape and the grid floats
        slices = check_int(slices, "gather_dot: slices", 1)
    T, k = idx.shape
    N = src.shape[1]
    if g.shape != (T, N) or not _unit_rows(g) or not g.dtype.is_floating_point:
        raise ValueError(f"gather_dot: g must be floating [{T}, {N}] with contiguous rows, "
                         f"got {tuple(g.shape)} {g.dtype} (strides {g.stride()})")
    _check_device("gather_dot", src, g=g)
    out = torch.empty((T, k), dtype=torch.float32, device=src.device)
    if out.numel() == 0:
        return out
    if N == 0:
        return out.zero_()
    aligned = _vectorizes((src, src.stride(0)), (src2, src2.stride(0)), (g, g.stride(0)))
    block_t, block_n = _dot_blocks(N, k, src.element_size(), aligned)
    col_blocks = cdiv(N, block_n)
    if slices is None:
        slices = _column_slices(src.device, cdiv(T, block_t), col_blocks)
    per_slice = cdiv(col_blocks, max(1, min(slices, col_blocks)))
    slices = cdiv(col_blocks, per_slice)
    acc = acc_type(src.dtype)
    wide = acc == tl.float64  # the slices' sums kept in float64 until the one rounding
    part = out if slices == 1 and not wide else out.new_empty(
        (slices, T, k), dtype=torch.float64 if wide else torch.float32)
    _GATHER_DOT[(cdiv(T, block_t), slices)](src, idx, src2, idx2, g, part, T, N,
                                            src.stride(0), src2.stride(0), g.stride(0),
                                            per_slice, K=k, KB=next_power_of_2(k), TWO=two,
                                            BLOCK_T=block_t, BLOCK_N=block_n, ACC=acc,
                                            num_warps=4)
    if part is out:
        return out
    return torch.sum(part, 0, out=out) if not wide else out.copy_(part.sum(0))
