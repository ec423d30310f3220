"""Lab (session 31): how fast do the MLP's up tiles stream their weights, by layout and
tile config, against cuBLAS? One program per tile (a plain grid), bf16, one GPU.

    python3 bench/results/2026-12-01-h200-s31/scripts/tile_bw.py [--quick]

Layouts: ``kn`` (weights stored [K, N], the bench's until session 31) and ``linear``
(stored [N, K] as nn.Linear keeps them, passed transposed). Kernels: ``two_loops``
(``tiles.gated_matmul_tile`` as of ``f29e4f0``: the gate GEMM, then the up GEMM)
and ``one_loop`` (both weight tiles loaded in one K loop, what it became in session 31).
"""
import functools
import itertools
import json
import statistics
import sys

import torch
import triton
import triton.language as tl

from ditron.kernels import tiles


@triton.jit
def two_loops(x, wg, wu, h, M, N, K, sxm, sxk, sgk, sgn, suk, sun, shm, shn,
              BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    offs_m, offs_n = tiles._coords(tl.program_id(0), N, BM, BN)
    gate = tiles._dot(x, wg, M, N, K, sxm, sxk, sgk, sgn, offs_m, offs_n, BM, BN, BK, "tf32",
                      False)
    up = tiles._dot(x, wu, M, N, K, sxm, sxk, suk, sun, offs_m, offs_n, BM, BN, BK, "tf32",
                    False)
    gate = gate.to(h.dtype.element_ty).to(tl.float32)
    up = up.to(h.dtype.element_ty).to(tl.float32)
    act = (gate / (1.0 + tl.exp(-gate))).to(h.dtype.element_ty).to(tl.float32)
    mask = (offs_m[:, None] < M) & (offs_n[None, :] < N)
    tl.store(h + offs_m[:, None] * shm + offs_n[None, :] * shn,
             (act * up).to(h.dtype.element_ty), mask=mask)


@triton.jit
def one_loop(x, wg, wu, h, M, N, K, sxm, sxk, sgk, sgn, suk, sun, shm, shn,
             BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    tiles_n = tl.cdiv(N, BN)
    t = tl.program_id(0)
    offs_m = (t // tiles_n) * BM + tl.arange(0, BM)
    offs_n = (t % tiles_n) * BN + tl.arange(0, BN)
    gate = tl.zeros((BM, BN), dtype=tl.float32)
    up = tl.zeros((BM, BN), dtype=tl.float32)
    for k0 in range(0, K, BK):
        offs_k = k0 + tl.arange(0, BK)
        a = tl.load(x + offs_m[:, None] * sxm + offs_k[None, :] * sxk,
                    mask=(offs_m[:, None] < M) & (offs_k[None, :] < K), other=0.0)
        bmask = (offs_k[:, None] < K) & (offs_n[None, :] < N)
        g = tl.load(wg + offs_k[:, None] * sgk + offs_n[None, :] * sgn, mask=bmask, other=0.0)
        u = tl.load(wu + offs_k[:, None] * suk + offs_n[None, :] * sun, mask=bmask, other=0.0)
        gate = tl.dot(a, g, gate)
        up = tl.dot(a, u, up)
    gate = gate.to(h.dtype.element_ty).to(tl.float32)
    up = up.to(h.dtype.element_ty).to(tl.float32)
    act = (gate / (1.0 + tl.exp(-gate))).to(h.dtype.element_ty).to(tl.float32)
    mask = (offs_m[:, None] < M) & (offs_n[None, :] < N)
    tl.store(h + offs_m[:, None] * shm + offs_n[None, :] * shn,
             (act * up).to(h.dtype.element_ty), mask=mask)


def swiglu(x, wg, wu):
    return torch.nn.functional.silu(x @ wg) * (x @ wu)


def median_us(fn, warmup=5, iters=40):
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(iters):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        fn()
        e.record()
        e.synchronize()
        times.append(s.elapsed_time(e) * 1e3)
    return statistics.median(times)


def main():
    quick = "--quick" in sys.argv
    rows = []
    torch.manual_seed(0)
    for M, K, N in ((16, 4096, 11008), (16, 1024, 2816)):
        x = torch.randn(M, K, device="cuda", dtype=torch.bfloat16)
        ref = None
        for layout in ("kn", "linear"):
            if layout == "kn":
                wg = torch.randn(K, N, device="cuda", dtype=torch.bfloat16) / K ** 0.5
                wu = torch.randn(K, N, device="cuda", dtype=torch.bfloat16) / K ** 0.5
            else:
                wg = (torch.randn(N, K, device="cuda", dtype=torch.bfloat16) / K ** 0.5).t()
                wu = (torch.randn(N, K, device="cuda", dtype=torch.bfloat16) / K ** 0.5).t()
            ref = torch.nn.functional.silu(x @ wg) * (x @ wu)
            gbytes = 2 * K * N * 2 / 1e9
            t = median_us(functools.partial(swiglu, x, wg, wu))
            tg = median_us(functools.partial(torch.matmul, x, wg))
            rows.append(dict(M=M, K=K, N=N, layout=layout, kernel="cublas", us=t,
                             gemm_us=2 * tg, TBps=gbytes / (2 * tg) * 1e6 / 1e3))
            print(rows[-1], flush=True)
            h = torch.empty(M, N, device="cuda", dtype=torch.bfloat16)
            bns = (16, 32, 64, 128) if not quick else (32, 64)
            bks = (128, 256, 512) if not quick else (128, 256)
            for kern, bn, bk, st, wp in itertools.product((two_loops, one_loop), bns, bks,
                                                          (3, 5), (4, 8)):
                if bn * bk > 64 * 512 or (wp == 8 and bn * bk < 64 * 256):
                    continue
                grid = (triton.cdiv(M, 16) * triton.cdiv(N, bn),)
                try:
                    fn = functools.partial(kern[grid], x, wg, wu, h, M, N, K, *x.stride(),
                                           *wg.stride(), *wu.stride(), *h.stride(), 16, bn,
                                           bk, num_stages=st, num_warps=wp)
                    h.fill_(float("nan"))
                    fn()
                    err = float((h.float() - ref.float()).abs().max() / ref.float().abs().max())
                    us = median_us(fn)
                except Exception as exc:  # out of shared memory and the like
                    print("skip", kern.fn.__name__, bn, bk, st, wp, type(exc).__name__)
                    continue
                rows.append(dict(M=M, K=K, N=N, layout=layout, kernel=kern.fn.__name__, bn=bn,
                                 bk=bk, stages=st, warps=wp, us=us,
                                 TBps=gbytes / us * 1e6 / 1e3, err=err))
            best = sorted((r for r in rows if r["K"] == K and r["layout"] == layout
                           and r["kernel"] != "cublas"), key=lambda r: r["us"])[:6]
            for r in best:
                print("  ", r, flush=True)
    with open(sys.argv[sys.argv.index("--out") + 1] if "--out" in sys.argv else "tile_bw.json",
              "w") as f:
        json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
