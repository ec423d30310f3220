"""Weighted gather-sum: ``out[t] = sum_j w[t, j] * src[idx[t, j]]`` (the MoE combine's sum).

``src [R, N]``, ``idx [T, k]`` integer row indices into ``src`` (``-1``: no row, counts
zero), ``w [T, k]`` floating or ``None`` (weight 1); fp32 accumulation, ``out [T, N]`` in
``src``'s dtype. One pass: each program gathers the ``k`` rows of a block of tokens and
sums them in registers, where a torch formulation writes and rereads ``[T, k, N]`` fp32
intermediates.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from ..runtime.grid_math import cdiv, next_power_of_2
from ..runtime.triton_launch import FastKernel


@triton.jit
def _gather_sum_kernel(src, idx, weights, out, T, N, s_src, s_out,
                       K: tl.constexpr, HAS_W: tl.constexpr, BLOCK_T: tl.constexpr,
                       BLOCK_N: tl.constexpr):
    ts = tl.program_id(0) * BLOCK_T + tl.arange(0, BLOCK_T)
    cols = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    t_ok = ts < T
    col_ok = cols < N
    acc = tl.zeros((BLOCK_T, BLOCK_N), dtype=tl.float32)
    for j in tl.static_range(K):
        rows = tl.load(idx + ts.to(tl.int64) * K + j, mask=t_ok, other=-1)
        ok = rows >= 0
        v = tl.load(src + rows.to(tl.int64)[:, None] * s_src + cols[None, :],
                    mask=ok[:, None] & col_ok[None, :], other=0.0).to(tl.float32)
        if HAS_W:
            wj = tl.load(weights + ts.to(tl.int64) * K + j, mask=t_ok & ok, other=0.0)
            v = v * wj.to(tl.float32)[:, None]
        acc += v
    o_ptrs = out + ts.to(tl.int64)[:, None] * s_out + cols[None, :]
    tl.store(o_ptrs, acc.to(out.dtype.element_ty), mask=t_ok[:, None] & col_ok[None, :])


_GATHER_SUM = FastKernel(_gather_sum_kernel)


def weighted_gather_sum(src: torch.Tensor, idx: torch.Tensor,
                        weights: torch.Tensor | None = None) -> torch.Tensor:
    """``out[t] = sum_j weights[t, j] * src[idx[t, j]]`` (see the module docstring); rows
    with ``idx < 0`` count zero. ``src`` rows must be contiguous (stride 1 in dim 1)."""
    if src.dim() != 2 or idx.dim() != 2 or src.stride(1) != 1:
        raise ValueError(f"weighted_gather_sum: need src [R, N] with contiguous rows and idx "
                         f"[T, k], got {tuple(src.shape)} (strides {src.stride()}) and "
                         f"{tuple(idx.shape)}")
    if weights is not None and weights.shape != idx.shape:
        raise ValueError(f"weighted_gather_sum: weights must be {tuple(idx.shape)}, got "
                         f"{tuple(weights.shape)}")
    T, k = idx.shape
    N = src.shape[1]
    out = torch.empty((T, N), dtype=src.dtype, device=src.device)
    if out.numel() == 0:
        return out
    if k == 0:
        return out.zero_()
    idx = idx.contiguous()
    w = idx if weights is None else weights.contiguous()
    block_n = min(next_power_of_2(N), 256 if src.device.type == "cuda" else 64)
    block_t = 8 if src.device.type == "cuda" else 16
    grid = (cdiv(T, block_t), cdiv(N, block_n))
    _GATHER_SUM[grid](src, idx, w, out, T, N, src.stride(0), out.stride(0), K=k,
                      HAS_W=weights is not None, BLOCK_T=block_t, BLOCK_N=block_n, num_warps=4)
    return out
