"""Tile functions: one output tile per call, for task graphs (``ditron.task``).

Each function computes the tile ``tile`` of its ``[M, N]`` output, with fp32 accumulation
and masks for edges, so any ``M``, ``N``, ``K`` work. Tile ids follow the grouped order of
``swizzle.grouped`` with ``GROUP_M`` row blocks: the row blocks of a group are consecutive
ids for each column block, so tiles that read the same weight columns run at about the same
time and share them in L2 (with up to ``GROUP_M`` row blocks, all of them do).
``tile_box`` gives the same tiling on the host (for regions).
``BLOCK_M`` must be at least 16 (``tl.dot``); ``UPCAST`` is the CPU backend's fp32 upcast
(``kernels/gemm.py`` says why), ``DOT_PRECISION`` Triton's ``input_precision`` and
``NUM_STAGES`` the depth of the K loop's software pipeline (``None``, the default: the
launch's ``num_stages``). The GEMM tiles take their operands as pointers with strides or,
with ``TMA``, as host TMA descriptors (``descriptors.describe``; a weight's ``_NK`` flag
says its descriptor is on its transpose); the output is stored through pointers either
way. A caller that waited for data stored by other programs fences the async proxy before
a ``TMA`` tile (``dl.fence_async_proxy``; the megakernel does).
"""

from __future__ import annotations

import triton
import triton.language as tl

from .. import language as dl

#: row blocks per group of the grouped tile order
GROUP_M = 8
_GROUP_M = tl.constexpr(GROUP_M)


def tile_box(tile: int, M: int, N: int, block_m: int, block_n: int
             ) -> tuple[tuple[int, int], ...]:
    """Rows and columns ``((m0, m1), (n0, n1))`` of tile ``tile`` of an ``[M, N]`` output
    (stops may pass the end; regions clip them). ``ValueError`` for a tile id outside
    ``[0, num_tiles(M, N, block_m, block_n))``."""
    count = num_tiles(M, N, block_m, block_n)
    if not 0 <= tile < count:
        raise ValueError(f"tile_box: tile {tile} of an [{M}, {N}] output in "
                         f"{block_m} x {block_n} tiles must lie in [0, {count})")
    mb, nb = _grouped(tile, -(-M // block_m), -(-N // block_n))
    return (mb * block_m, (mb + 1) * block_m), (nb * block_n, (nb + 1) * block_n)


def _grouped(tile: int, tiles_m: int, tiles_n: int) -> tuple[int, int]:
    """``(mb, nb)`` of ``tile`` in the grouped order (as ``_coords``)."""
    group, offset = divmod(tile, GROUP_M * tiles_n)
    first = group * GROUP_M
    size = min(tiles_m - first, GROUP_M)
    return first + offset % size, offset // size


def num_tiles(M: int, N: int, block_m: int, block_n: int) -> int:
    return -(-M // block_m) * -(-N // block_n)


@triton.jit
def _origin(tile, M, N, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    """First row and column ``(m0, n0)`` of ``tile`` in the grouped order."""
    tiles_m = tl.cdiv(M, BLOCK_M)
    tiles_n = tl.cdiv(N, BLOCK_N)
    in_group = _GROUP_M * tiles_n
    first = (tile // in_group) * _GROUP_M
    size = tl.minimum(tiles_m - first, _GROUP_M)
    offset = tile % in_group
    return (first + offset % size) * BLOCK_M, (offset // size) * BLOCK_N


@triton.jit
def _coords(tile, M, N, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    """Rows and columns of ``tile`` (``tl.arange`` vectors, past the ends at the edges)."""
    m0, n0 = _origin(tile, M, N, BLOCK_M, BLOCK_N)
    return m0 + tl.arange(0, BLOCK_M), n0 + tl.arange(0, BLOCK_N)


@triton.jit
def _block(a, r0, c0, R, C, stride_r, stride_c, BLOCK_R: tl.constexpr,
           BLOCK_C: tl.constexpr, TMA: tl.constexpr, TRANSPOSED: tl.constexpr):
    """``a[r0:r0 + BLOCK_R, c0:c0 + BLOCK_C]`` of an ``[R, C]`` operand, zeros past ``R`` and
    ``C``. ``TMA``: ``a`` is a descriptor (``descriptors.describe``), on ``a.t()`` when
    ``TRANSPOSED`` (the block is loaded as ``[BLOCK_C, BLOCK_R]`` and transposed); its own
    shape bounds the load instead of ``R``, ``C``."""
    if TMA:
        if TRANSPOSED:
            block = a.load([c0, r0]).T
        else:
            block = a.load([r0, c0])
    else:
        offs_r = r0 + tl.arange(0, BLOCK_R)
        offs_c = c0 + tl.arange(0, BLOCK_C)
        block = tl.load(a + offs_r[:, None] * stride_r + offs_c[None, :] * stride_c,
                        mask=(offs_r[:, None] < R) & (offs_c[None, :] < C), other=0.0)
    return block


@triton.jit
def _dot(a, b, M, N, K, stride_am, stride_ak, stride_bk, stride_bn, m0, n0,
         BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
         DOT_PRECISION: tl.constexpr, UPCAST: tl.constexpr, k_lo=0,
         NUM_STAGES: tl.constexpr = None, TMA: tl.constexpr = False,
         B_NK: tl.constexpr = False):
    """``a[m0:, k_lo:K] @ b[k_lo:K, n0:]`` (a ``BLOCK_M x BLOCK_N`` block) in fp32; the K
    loop pipelined ``NUM_STAGES`` deep."""
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in tl.range(0, K - k_lo, BLOCK_K, num_stages=NUM_STAGES):
        k = k_lo + k0
        a_tile = _block(a, m0, k, M, K, stride_am, stride_ak, BLOCK_M, BLOCK_K, TMA, False)
        b_tile = _block(b, k, n0, K, N, stride_bk, stride_bn, BLOCK_K, BLOCK_N, TMA, B_NK)
        if UPCAST:
            a_tile = a_tile.to(tl.float32)
            b_tile = b_tile.to(tl.float32)
        acc = tl.dot(a_tile, b_tile, acc, input_precision=DOT_PRECISION)
    return acc


@triton.jit
def matmul_tile(tile, a, b, c, M, N, K, stride_am, stride_ak, stride_bk, stride_bn,
                stride_cm, stride_cn, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                BLOCK_K: tl.constexpr, DOT_PRECISION: tl.constexpr, UPCAST: tl.constexpr,
                NUM_STAGES: tl.constexpr = None, TMA: tl.constexpr = False,
                B_NK: tl.constexpr = False):
    """``c[tile] = a[rows, :] @ b[:, cols]`` (``a``: [M, K], ``b``: [K, N], any strides;
    with ``TMA``, descriptors of them, ``b``'s on ``b.t()`` when ``B_NK``)."""
    m0, n0 = _origin(tile, M, N, BLOCK_M, BLOCK_N)
    acc = _dot(a, b, M, N, K, stride_am, stride_ak, stride_bk, stride_bn, m0, n0,
               BLOCK_M, BLOCK_N, BLOCK_K, DOT_PRECISION, UPCAST, 0, NUM_STAGES, TMA, B_NK)
    offs_m = m0 + tl.arange(0, BLOCK_M)
    offs_n = n0 + tl.arange(0, BLOCK_N)
    mask = (offs_m[:, None] < M) & (offs_n[None, :] < N)
    tl.store(c + offs_m[:, None] * stride_cm + offs_n[None, :] * stride_cn,
             acc.to(c.dtype.element_ty), mask=mask)


@triton.jit
def _dot_pair(a, b, c, M, N, K, stride_am, stride_ak, stride_bk, stride_bn, stride_ck,
              stride_cn, m0, n0, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
              BLOCK_K: tl.constexpr, DOT_PRECISION: tl.constexpr, UPCAST: tl.constexpr,
              NUM_STAGES: tl.constexpr, TMA: tl.constexpr, B_NK: tl.constexpr,
              C_NK: tl.constexpr):
    """``(a[m0:, :] @ b[:, n0:], a[m0:, :] @ c[:, n0:])`` in fp32, in one K loop: each step
    loads the ``a`` tile once and both weight tiles together (more bytes in flight per step
    than two loops one after the other)."""
    acc_b = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    acc_c = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in tl.range(0, K, BLOCK_K, num_stages=NUM_STAGES):
        a_tile = _block(a, m0, k, M, K, stride_am, stride_ak, BLOCK_M, BLOCK_K, TMA, False)
        b_tile = _block(b, k, n0, K, N, stride_bk, stride_bn, BLOCK_K, BLOCK_N, TMA, B_NK)
        c_tile = _block(c, k, n0, K, N, stride_ck, stride_cn, BLOCK_K, BLOCK_N, TMA, C_NK)
        if UPCAST:
            a_tile = a_tile.to(tl.float32)
            b_tile = b_tile.to(tl.float32)
            c_tile = c_tile.to(tl.float32)
        acc_b = tl.dot(a_tile, b_tile, acc_b, input_precision=DOT_PRECISION)
        acc_c = tl.dot(a_tile, c_tile, acc_c, input_precision=DOT_PRECISION)
    return acc_b, acc_c


@triton.jit
def gated_matmul_tile(tile, x, w_gate, w_up, h, M, N, K, stride_xm, stride_xk, stride_gk,
                      stride_gn, stride_uk, stride_un, stride_hm, stride_hn,
                      BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                      DOT_PRECISION: tl.constexpr, UPCAST: tl.constexpr,
                      NUM_STAGES: tl.constexpr = None, TMA: tl.constexpr = False,
                      GATE_NK: tl.constexpr = False, UP_NK: tl.constexpr = False):
    """``h[tile] = silu(x @ w_gate) * (x @ w_up)`` (SwiGLU; ``w_gate``, ``w_up``: [K, N];
    with ``TMA``, descriptors of ``x`` and the weights, a weight's on its transpose when
    its ``_NK`` is set)."""
    m0, n0 = _origin(tile, M, N, BLOCK_M, BLOCK_N)
    gate, up = _dot_pair(x, w_gate, w_up, M, N, K, stride_xm, stride_xk, stride_gk,
                         stride_gn, stride_uk, stride_un, m0, n0, BLOCK_M, BLOCK_N,
                         BLOCK_K, DOT_PRECISION, UPCAST, NUM_STAGES, TMA, GATE_NK, UP_NK)
    gate = gate.to(h.dtype.element_ty).to(tl.float32)  # as torch rounds between its ops
    up = up.to(h.dtype.element_ty).to(tl.float32)
    act = (gate / (1.0 + tl.exp(-gate))).to(h.dtype.element_ty).to(tl.float32)
    offs_m = m0 + tl.arange(0, BLOCK_M)
    offs_n = n0 + tl.arange(0, BLOCK_N)
    mask = (offs_m[:, None] < M) & (offs_n[None, :] < N)
    tl.store(h + offs_m[:, None] * stride_hm + offs_n[None, :] * stride_hn,
             (act * up).to(h.dtype.element_ty), mask=mask)


@triton.jit
def matmul_push_tile(tile, a, b, inbox, M, N, K, K_CHUNK, SPLIT, stride_am, stride_ak,
                     stride_bk, stride_bn, stride_im, stride_in, ctx, BLOCK_M: tl.constexpr,
                     BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                     DOT_PRECISION: tl.constexpr, UPCAST: tl.constexpr,
                     NUM_STAGES: tl.constexpr = None, TMA: tl.constexpr = False,
                     B_NK: tl.constexpr = False):
    """Tile of a split-K partial of ``a @ b``, stored into every rank's ``inbox`` by plain
    remote stores.

    Tiles ``tile = kc * tiles + t`` (``tiles`` the ``[M, N]`` tiles, ``kc < SPLIT``) take
    the ``K`` range ``[kc * K_CHUNK, (kc + 1) * K_CHUNK)``; the partial goes to slot
    ``rank * SPLIT + kc`` (rows ``slot * M ..``) of the symmetric ``[world_size * SPLIT * M,
    N]`` inbox of every rank. With ``TMA`` (descriptors of ``a`` and ``b`` as in
    :func:`matmul_tile`) ``K_CHUNK`` must be a multiple of ``BLOCK_K``: a descriptor's
    loads stop only at ``K``."""
    tiles_mn = tl.cdiv(M, BLOCK_M) * tl.cdiv(N, BLOCK_N)
    kc = tile // tiles_mn
    m0, n0 = _origin(tile % tiles_mn, M, N, BLOCK_M, BLOCK_N)
    k_hi = tl.minimum(K, (kc + 1) * K_CHUNK)
    acc = _dot(a, b, M, N, k_hi, stride_am, stride_ak, stride_bk, stride_bn, m0, n0,
               BLOCK_M, BLOCK_N, BLOCK_K, DOT_PRECISION, UPCAST, kc * K_CHUNK, NUM_STAGES,
               TMA, B_NK)
    value = acc.to(inbox.dtype.element_ty)
    offs_m = m0 + tl.arange(0, BLOCK_M)
    offs_n = n0 + tl.arange(0, BLOCK_N)
    mask = (offs_m[:, None] < M) & (offs_n[None, :] < N)
    slot = ctx.rank * SPLIT + kc
    ptrs = inbox + (slot * M + offs_m)[:, None] * stride_im + offs_n[None, :] * stride_in
    for i in range(0, ctx.world_size):
        dl.store(ptrs, value, (ctx.rank + i) % ctx.world_size, ctx, mask=mask)


@triton.jit
def sum_slots_tile(tile, inbox, residual, out, M, N, SLOTS, stride_im, stride_in, stride_rm,
                   stride_rn, stride_om, stride_on, BLOCK_M: tl.constexpr,
                   BLOCK_N: tl.constexpr, HAS_RESIDUAL: tl.constexpr):
    """``out[tile] = sum_s inbox[s * M + rows, cols] (+ residual[tile])``, summed in fp32."""
    offs_m, offs_n = _coords(tile, M, N, BLOCK_M, BLOCK_N)
    mask = (offs_m[:, None] < M) & (offs_n[None, :] < N)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for s in range(0, SLOTS):
        ptrs = inbox + (s * M + offs_m)[:, None] * stride_im + offs_n[None, :] * stride_in
        acc += tl.load(ptrs, mask=mask, other=0.0).to(tl.float32)
    if HAS_RESIDUAL:
        acc = acc.to(out.dtype.element_ty).to(tl.float32)
        acc += tl.load(residual + offs_m[:, None] * stride_rm + offs_n[None, :] * stride_rn,
                       mask=mask, other=0.0).to(tl.float32)
    tl.store(out + offs_m[:, None] * stride_om + offs_n[None, :] * stride_on,
             acc.to(out.dtype.element_ty), mask=mask)
