"""K-split tails for the local GEMM's last, partial wave (an experiment; ``gemm_lab.py``).

8192 x 1376 x 4096 takes 384 tiles of 128 x 256 (12% of them padding) on 132 SMs: three
rounds where 2.6 would do. Two kernels split the tiles of the last wave along K so every SM
works to the end: :func:`lab_streamk` (stream-K: the tail's K steps cut into one even range
per program) and :func:`lab_splitk` (each tail tile cut into ``split`` equal K chunks).
Both compute ``C = A B^T`` (``B`` a ``[N, K]`` weight) through TMA descriptors, optionally
swapped (``C^T = B A^T``: 352 tiles with 2% padding instead of 384). Measured on one H200
in session 57 (docs/perf.md): without their fix-up (a probe with wrong results) the
swapped split tail reached 1.02x cuBLAS; with it, 0.85-0.89x, below the plain GEMM.

    TRITON_INTERPRET=1 python bench/gemm_tails.py   # check the index logic on the CPU
"""

from __future__ import annotations

import os

import torch
import triton
import triton.language as tl
from triton.tools.tensor_descriptor import TensorDescriptor

from ditron.kernels.gemm import GemmConfig


@triton.jit
def _grouped_tile(t, m_blocks, n_blocks, GROUP_M: tl.constexpr):
    per_group = GROUP_M * n_blocks
    first_m = (t // per_group) * GROUP_M
    rows_in_group = tl.minimum(m_blocks - first_m, GROUP_M)
    return first_m + (t % per_group) % rows_in_group, (t % per_group) // rows_in_group


@triton.jit
def _store_tile(c_desc, acc, mb, nb, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
               SWAP: tl.constexpr):
    if SWAP:
        c_desc.store([nb * BLOCK_N, mb * BLOCK_M], tl.trans(acc).to(c_desc.dtype))
    else:
        c_desc.store([mb * BLOCK_M, nb * BLOCK_N], acc.to(c_desc.dtype))


@triton.jit
def _whole_tiles(a_desc, b_desc, c_desc, M, N, K, dp_tiles, BLOCK_M: tl.constexpr,
                 BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
                 SWAP: tl.constexpr, REVERSE: tl.constexpr):
    """The tail kernels' first phase: tiles ``0 .. dp_tiles`` of the grouped order, whole,
    program ``p`` taking ``p, p + P, ...``. Returns ``(p, P, m_blocks, n_blocks, k_steps)``;
    ``REVERSE`` numbers the programs backwards."""
    pid = tl.program_id(0)
    nprog = tl.num_programs(0)
    if REVERSE:
        pid = nprog - 1 - pid
    m_blocks = tl.cdiv(M, BLOCK_M)
    n_blocks = tl.cdiv(N, BLOCK_N)
    k_steps = tl.cdiv(K, BLOCK_K)
    for t in tl.range(pid, dp_tiles, nprog, flatten=True):
        mb, nb = _grouped_tile(t, m_blocks, n_blocks, GROUP_M)
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for ks in range(k_steps):
            a = a_desc.load([mb * BLOCK_M, ks * BLOCK_K])
            b = b_desc.load([nb * BLOCK_N, ks * BLOCK_K])
            acc = tl.dot(a, b.T, acc)
        _store_tile(c_desc, acc, mb, nb, BLOCK_M, BLOCK_N, SWAP)
    return pid, nprog, m_blocks, n_blocks, k_steps


@triton.jit
def lab_splitk(a_desc, b_desc, c_desc, c_ptr, stride_cm, stride_cn, part_ptr, flag_ptr,
               M, N, K, dp_tiles, split,
               BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
               GROUP_M: tl.constexpr, SWAP: tl.constexpr, REVERSE: tl.constexpr = False,
               FIXUP: tl.constexpr = 1, SLAB: tl.constexpr = 32):
    """Whole tiles ``0 .. dp_tiles``, then the ``R`` remaining tiles cut into ``split`` equal
    K chunks: piece ``j`` is chunk ``j // R`` of tile ``j % R``; program ``p`` takes pieces
    ``p, p + P, ...`` (concurrent programs share K chunks, so their operands' K slices are
    read together). Pieces of chunks ``< split - 1`` store fp32 partials in ``part_ptr[j]``
    and raise ``flag_ptr[j]``; the last chunk's piece owns the tile: it acquires the others
    (all of smaller ``j``: no cycle), adds them, resets their flags and stores the tile.

    ``FIXUP`` 1: the owner adds each partial to its registers. 2: the owner stores its own
    partial too, then sums the partials ``SLAB`` rows at a time and stores those rows through
    ``c_ptr`` (``(stride_cm, stride_cn)``: the strides of this kernel's rows and columns in
    C), so no full second tile sits in registers. Timing probes (wrong results): 0, no
    partials, every piece stores; 3, as 1 without waiting for the flags. The CPU interpreter
    runs programs in order: there only one piece per program can finish."""
    pid, nprog, m_blocks, n_blocks, k_steps = _whole_tiles(
        a_desc, b_desc, c_desc, M, N, K, dp_tiles, BLOCK_M, BLOCK_N, BLOCK_K, GROUP_M, SWAP,
        REVERSE)
    rest = m_blocks * n_blocks - dp_tiles
    offs_m = tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    tile_offs = offs_m[:, None] * BLOCK_N + offs_n[None, :]
    for j in range(pid, rest * split, nprog):
        chunk = j // rest
        t = j % rest
        mb, nb = _grouped_tile(dp_tiles + t, m_blocks, n_blocks, GROUP_M)
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for ks in range(chunk * k_steps // split, (chunk + 1) * k_steps // split):
            a = a_desc.load([mb * BLOCK_M, ks * BLOCK_K])
            b = b_desc.load([nb * BLOCK_N, ks * BLOCK_K])
            acc = tl.dot(a, b.T, acc)
        if FIXUP == 0:
            _store_tile(c_desc, acc, mb, nb, BLOCK_M, BLOCK_N, SWAP)
        elif chunk < split - 1:
            tl.store(part_ptr + j * BLOCK_M * BLOCK_N + tile_offs, acc)
            tl.debug_barrier()  # every thread's stores before the one signalling thread's
            tl.atomic_xchg(flag_ptr + j, 1, sem="release")
        elif FIXUP == 2:
            tl.store(part_ptr + j * BLOCK_M * BLOCK_N + tile_offs, acc)
            for c in range(0, split - 1):
                q = c * rest + t
                while tl.atomic_add(flag_ptr + q, 0, sem="acquire") == 0:
                    pass
                tl.atomic_xchg(flag_ptr + q, 0, sem="relaxed")
            tl.debug_barrier()  # the other pieces' partials and this one's own stores
            slab_m = tl.arange(0, SLAB)
            slab_offs = slab_m[:, None] * BLOCK_N + offs_n[None, :]
            for r in tl.static_range(0, BLOCK_M, SLAB):
                total = tl.zeros((SLAB, BLOCK_N), dtype=tl.float32)
                for c in range(0, split):
                    total += tl.load(part_ptr + (c * rest + t) * BLOCK_M * BLOCK_N
                                     + r * BLOCK_N + slab_offs)
                rows = mb * BLOCK_M + r + slab_m
                cols = nb * BLOCK_N + offs_n
                tl.store(c_ptr + rows[:, None] * stride_cm + cols[None, :] * stride_cn,
                         total.to(c_ptr.dtype.element_ty),
                         mask=(rows < M)[:, None] & (cols < N)[None, :])
        else:
            for c in range(0, split - 1):
                q = c * rest + t
                if FIXUP != 3:
                    while tl.atomic_add(flag_ptr + q, 0, sem="acquire") == 0:
                        pass
                    tl.debug_barrier()
                acc += tl.load(part_ptr + q * BLOCK_M * BLOCK_N + tile_offs)
                tl.atomic_xchg(flag_ptr + q, 0, sem="relaxed")
            _store_tile(c_desc, acc, mb, nb, BLOCK_M, BLOCK_N, SWAP)


def split_for(rest: int, programs: int, limit: int = 4) -> int:
    """The K split of ``rest`` tiles over ``programs`` that finishes first: the fewest rounds
    of pieces, ``ceil(rest * s / programs) / s`` tiles' time, ties to the smaller ``s``."""
    return min(range(1, limit + 1), key=lambda s: (-(-rest * s // programs) / s, s))


@triton.jit
def lab_streamk(a_desc, b_desc, c_desc, part_ptr, flag_ptr, M, N, K, dp_tiles,
                BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                GROUP_M: tl.constexpr, SWAP: tl.constexpr, REVERSE: tl.constexpr = False,
                FIXUP: tl.constexpr = True):
    """Data-parallel tiles ``0 .. dp_tiles`` (whole waves), then stream-K: the K steps of the
    remaining tiles, laid end to end, are cut into one even range per program. A program's
    range ends with the head (K step 0) of a tile, which it owns; any other piece of a tile
    (a tail, or a middle piece) is the first piece of a later program, which stores its fp32
    partial in ``part_ptr[pid]`` and raises ``flag_ptr[pid]`` (release); the owner acquires
    the flags of the programs after it, adds their partials, resets the flags and stores the
    tile. Owners wait only for pieces computed at their programs' starts, so no cycle.
    ``REVERSE`` numbers the programs backwards (the CPU interpreter runs them in order).
    ``FIXUP=False`` (a timing probe, wrong results): every piece stores, nobody waits."""
    pid, nprog, m_blocks, n_blocks, k_steps = _whole_tiles(
        a_desc, b_desc, c_desc, M, N, K, dp_tiles, BLOCK_M, BLOCK_N, BLOCK_K, GROUP_M, SWAP,
        REVERSE)
    total = (m_blocks * n_blocks - dp_tiles) * k_steps
    it = pid.to(tl.int64) * total // nprog
    end = (pid + 1).to(tl.int64) * total // nprog
    offs_m = tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    part = part_ptr + pid * BLOCK_M * BLOCK_N + offs_m[:, None] * BLOCK_N + offs_n[None, :]
    while it < end:
        t = (it // k_steps).to(tl.int32)
        k_lo = (it % k_steps).to(tl.int32)
        k_hi = tl.minimum(k_steps, k_lo + (end - it)).to(tl.int32)
        mb, nb = _grouped_tile(dp_tiles + t, m_blocks, n_blocks, GROUP_M)
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for ks in range(k_lo, k_hi):
            a = a_desc.load([mb * BLOCK_M, ks * BLOCK_K])
            b = b_desc.load([nb * BLOCK_N, ks * BLOCK_K])
            acc = tl.dot(a, b.T, acc)
        if not FIXUP:
            _store_tile(c_desc, acc, mb, nb, BLOCK_M, BLOCK_N, SWAP)
        elif k_lo != 0:
            tl.store(part, acc)
            tl.debug_barrier()  # every thread's stores before the one signalling thread's
            tl.atomic_xchg(flag_ptr + pid, 1, sem="release")
        else:
            # the pieces after this head start programs pid + 1, pid + 2, ...
            done = k_hi
            q = pid + 1
            while done < k_steps:
                q_end = (q + 1).to(tl.int64) * total // nprog
                if q_end > q.to(tl.int64) * total // nprog:  # else: q has no work
                    while tl.atomic_add(flag_ptr + q, 0, sem="acquire") == 0:
                        pass
                    tl.debug_barrier()
                    other = (part_ptr + q * BLOCK_M * BLOCK_N + offs_m[:, None] * BLOCK_N
                             + offs_n[None, :])
                    acc += tl.load(other)
                    tl.atomic_xchg(flag_ptr + q, 0, sem="relaxed")
                done = tl.minimum(k_steps, (q_end - t.to(tl.int64) * k_steps)).to(tl.int32)
                q += 1
            _store_tile(c_desc, acc, mb, nb, BLOCK_M, BLOCK_N, SWAP)
        it += k_hi - k_lo


def streamk_call(a, w, c, cfg: GemmConfig, swap: bool = False, programs: int = 0,
                 extra_waves: int = 0, work: dict | None = None, split: int | None = None,
                 fixup: int = 1):
    """``c = a @ w.t()`` by :func:`lab_streamk` (``split=None``) or :func:`lab_splitk` (``split``
    chunks; 0: :func:`split_for`'s): whole waves of ``programs`` (default one per SM) tiles
    first, then the last partial wave (plus ``extra_waves`` whole ones; -1: none) split along K.
    ``work`` caches the partials and flags (zeroed once; owners reset the flags they read).
    ``fixup``: :func:`lab_splitk`'s ``FIXUP`` (stream-K: 0 or 1)."""
    M, K = a.shape
    N = w.shape[0]
    if swap:
        a, w, M, N = w, a, N, M
    interpret = os.environ.get("TRITON_INTERPRET") == "1"
    P = programs or (4 if interpret else
                     torch.cuda.get_device_properties(a.device).multi_processor_count)
    tiles = triton.cdiv(M, cfg.block_m) * triton.cdiv(N, cfg.block_n)
    P = min(P, tiles)
    dp = max(0, (tiles // P - extra_waves) * P) if tiles % P and extra_waves >= 0 else tiles
    if split is not None:
        split = split or split_for(tiles - dp, P)
    slots = P if split is None else max(1, (tiles - dp) * split)
    work = {} if work is None else work
    if "part" not in work:
        work["part"] = torch.empty(slots, cfg.block_m * cfg.block_n, device=a.device,
                                   dtype=torch.float32)
        work["flag"] = torch.zeros(slots, device=a.device, dtype=torch.int32)
    ad = TensorDescriptor(a, [M, K], [K, 1], [cfg.block_m, cfg.block_k])
    bd = TensorDescriptor(w, [N, K], [K, 1], [cfg.block_n, cfg.block_k])
    cd = (TensorDescriptor(c, [N, M], [M, 1], [cfg.block_n, cfg.block_m]) if swap else
          TensorDescriptor(c, [M, N], [N, 1], [cfg.block_m, cfg.block_n]))
    consts = dict(BLOCK_M=cfg.block_m, BLOCK_N=cfg.block_n, BLOCK_K=cfg.block_k,
                  GROUP_M=cfg.group_m, SWAP=swap, REVERSE=interpret and split is None,
                  num_warps=cfg.num_warps, num_stages=cfg.num_stages)
    if split is None:
        lab_streamk[(P,)](ad, bd, cd, work["part"], work["flag"], M, N, K, dp,
                          FIXUP=bool(fixup), **consts)
    else:
        strides = (1, c.stride(0)) if swap else (c.stride(0), 1)
        lab_splitk[(P,)](ad, bd, cd, c, *strides, work["part"], work["flag"], M, N, K, dp,
                         split, FIXUP=int(fixup), **consts)


def check_on_cpu() -> None:
    """Every tail kernel against ``a @ w.t()`` on small shapes, twice (the flags reset), in
    Triton's interpreter: programs run one after another there, so a split case must give
    each program at most one piece."""
    cfg = GemmConfig(16, 32, 16, 2, 1, 1)
    cases = [  # M, N, K, programs, swap, split (None: stream-K), fixup
        (40, 72, 52, 3, False, None, 1), (40, 72, 52, 3, True, None, 1),
        (64, 96, 80, 4, False, None, 1), (48, 64, 80, 4, False, 2, 1),
        (48, 64, 64, 5, False, 0, 2), (48, 64, 80, 5, False, 3, 2), (64, 40, 80, 5, True, 0, 2),
        (64, 40, 80, 5, True, 0, 1),
    ]
    torch.manual_seed(0)
    for M, N, K, P, swap, split, fixup in cases:
        a, w = torch.randn(M, K), torch.randn(N, K)
        c = torch.empty(M, N)
        work: dict = {}
        for _ in range(2):
            c.fill_(float("nan"))
            streamk_call(a, w, c, cfg, swap, programs=P, work=work, split=split, fixup=fixup)
            err = (c - a @ w.t()).abs().max().item()
            assert err < 1e-4, (M, N, K, P, swap, split, fixup, err)
        assert not work["flag"].any()
        print(f"ok: {M}x{N}x{K} programs {P} swap {swap} split {split} fixup {fixup}")


if __name__ == "__main__":
    if os.environ.get("TRITON_INTERPRET") != "1":
        raise SystemExit("run with TRITON_INTERPRET=1 (the GPU runs go through gemm_lab.py)")
    check_on_cpu()
