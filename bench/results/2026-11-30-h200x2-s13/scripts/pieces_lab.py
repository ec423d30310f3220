"""The GEMM-RS local work cut by destination rows: cuBLAS against the persistent GEMM.

One H200, bf16, per-rank shapes of the 2-GPU GEMM-RS (M = 8192, K = K_global / 2), b =
w.t(). Each variant is the sequence of GEMMs one rank's GEMM-RS runs (no communication):
whole (the baseline's one GEMM), halves (a segment per GEMM, the pushed copy engine),
quarters (two chunks per segment), pull (2 peer quarters with matmul, then 2 own quarters
with addmm_ onto them). Under CUDA graphs of 10 sequences, variants in turns over 7
rounds, median; host us to issue one sequence.

    python bench/results/2026-11-30-h200x2-s13/scripts/pieces_lab.py [--shapes NxK,...]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", ".."))
from gemm_lab import capture, graph_rounds  # noqa: E402

from ditron.kernels.gemm import GemmConfig, cached_linear_order, launch_gemm  # noqa: E402

SHAPES = "4096x5504,4096x7168,3584x7168,4608x18432,8192x14336,8192x14784"
CONFIGS = {
    "t256": GemmConfig(128, 256, 64, 8, 8, 3, flatten=True, tma_store=True),
    "t128w4": GemmConfig(128, 128, 64, 8, 4, 4, flatten=True, tma_store=True),
    "t128w8": GemmConfig(128, 128, 64, 8, 8, 4, flatten=True, tma_store=True),
    "t256x128": GemmConfig(256, 128, 64, 8, 8, 3, flatten=True, tma_store=True),
    "t128x256s4": GemmConfig(128, 256, 64, 8, 8, 4, flatten=True),
}


def cuts(M: int, n: int) -> list[tuple[int, int]]:
    return [(M * i // n, M * (i + 1) // n) for i in range(n)]


def host_us(fn, n: int = 20) -> float:
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(n):
        fn()
    t = (time.perf_counter() - t0) * 1e6 / n
    torch.cuda.synchronize()
    return t


def run_shape(N: int, K: int, M: int = 8192) -> list[dict]:
    a = torch.randn(M, K, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(N, K, device="cuda", dtype=torch.bfloat16).t()
    ref = a.float() @ b.float()
    c = torch.empty(M, N, device="cuda", dtype=torch.bfloat16)
    half = M // 2

    def cublas(n):
        def fn():
            for lo, hi in cuts(M, n)[::-1]:  # the peer rows first, as a rank does
                torch.matmul(a[lo:hi], b, out=c[lo:hi])
        return fn

    def pull():
        for lo, hi in cuts(half, 2):
            torch.matmul(a[half + lo:half + hi], b, out=c[half + lo:half + hi])
        for lo, hi in cuts(half, 2):
            c[lo:hi].addmm_(a[lo:hi], b)  # onto the pulled partials (zeros in the check)

    def triton_pieces(cfg, n):
        pieces = cuts(M, n)[::-1]
        orders = {hi - lo: cached_linear_order(hi - lo, N, cfg, a.device) for lo, hi in pieces}

        def fn():
            for lo, hi in pieces:
                launch_gemm(a[lo:hi], b, c[lo:hi], hi - lo, order=orders[hi - lo],
                            seg_rows=hi - lo, cfg=cfg)
        return fn

    cases = {f"cublas x{n}": cublas(n) for n in (1, 2, 4)}
    cases["cublas pull (2 mm + 2 zero+addmm)"] = pull
    for name, cfg in CONFIGS.items():
        for n in (1, 2, 4):
            cases[f"{name} x{n}"] = triton_pieces(cfg, n)
    rows, graphs = [], {}
    for name, fn in cases.items():
        try:
            c.fill_(float("nan"))
            if fn is pull:
                c[:half].zero_()
            fn()
            torch.cuda.synchronize()
            err = ((c.float() - ref).norm() / ref.norm()).item()
            if not err < 1e-2:
                raise AssertionError(f"relative error {err}")
            for _ in range(3):
                fn()
            host = host_us(fn)
            graphs[name] = capture(fn)
        except Exception as exc:  # noqa: BLE001 - report and go on
            print(f"{N}x{K} {name}: FAILED {type(exc).__name__}: {str(exc)[:300]}", flush=True)
            continue
        rows.append(dict(M=M, N=N, K=K, variant=name, err=err, host=host))
    per_call = graph_rounds(graphs)
    whole = per_call["cublas x1"]
    for r in rows:
        r["graph"] = per_call[r["variant"]]
        r["x_cublas_whole"] = whole / r["graph"]
        print(f"{M}x{N}x{K:<7} {r['variant']:<36} graph {r['graph']:8.1f} us  "
              f"x whole cuBLAS {r['x_cublas_whole']:.3f}  host {r['host']:6.1f} us", flush=True)
    for g in graphs.values():
        del g
    return rows


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--shapes", default=SHAPES)
    p.add_argument("--out", default=os.environ.get("OUT", "."))
    args = p.parse_args()
    import ditron

    ditron.init("cuda")
    torch.manual_seed(0)
    rows = []
    for s in args.shapes.split(","):
        n, k = (int(x) for x in s.split("x"))
        rows += run_shape(n, k)
        torch.cuda.empty_cache()
    with open(os.path.join(args.out, "pieces_lab.json"), "w") as f:
        json.dump(rows, f, indent=1)
    hosts = [r["host"] for r in rows if r["variant"] == "cublas x1"]
    print(f"median host us of one cuBLAS GEMM: {statistics.median(hosts):.1f}")


if __name__ == "__main__":
    main()
