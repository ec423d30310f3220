"""s15a: cuBLAS time of row pieces (and column pieces) of the GEMM-RS local GEMM on one
H200; EAGER=1 times batches of 10 calls (what ran), else CUDA graphs of 10 calls (failed
with an illegal memory access in this session)."""
from __future__ import annotations

import json
import os
import sys

import torch

sys.path.insert(0, os.getcwd())
from bench.gemm_lab import graph_rounds  # noqa: E402

SHAPES = [(4096, 5504), (4096, 7168), (3584, 7168), (4608, 18432)]
M = 8192


class Eager:
    def __init__(self, fn, calls):
        self.fn, self.calls = fn, calls

    def replay(self):
        for _ in range(self.calls):
            self.fn()


def capture(fn, calls=10):
    if os.environ.get("EAGER"):
        fn()
        return Eager(fn, calls)
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(3):
            fn()
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for _ in range(calls):
            fn()
    return g


def main():
    out = os.environ.get("OUT", ".")
    res = {}
    for N, K in SHAPES:
        a = torch.randn(M, K, device="cuda", dtype=torch.bfloat16)
        b = torch.randn(N, K, device="cuda", dtype=torch.bfloat16).t()
        c = torch.empty(M, N, device="cuda", dtype=torch.bfloat16)
        graphs = {}
        torch.matmul(a[:1000], b, out=c[:1000])
        torch.cuda.synchronize()
        for m in list(range(512, M, 128)) + [M]:
            graphs[f"r{m}"] = capture(lambda m=m, a=a, b=b, c=c: torch.matmul(a[:m], b, out=c[:m]))
        for n in range(512, N, 256):
            cm = torch.empty(M, n, device="cuda", dtype=torch.bfloat16)
            graphs[f"k{n}"] = capture(
                lambda n=n, cm=cm, a=a, b=b: torch.matmul(a, b[:, :n], out=cm))
        t = graph_rounds(graphs, rounds=7, calls=10)
        res[f"{N}x{K}"] = t
        whole = t[f"r{M}"]
        print(f"== N={N} K={K} whole {whole:.1f} us", flush=True)
        best = []
        for m in range(512, M, 128):
            if f"r{M - m}" in t:
                s = t[f"r{m}"] + t[f"r{M - m}"]
                best.append((s, m))
        best.sort()
        print("row splits m1+m2 (best 12):",
              ", ".join(f"{m}:{s:.1f}({s / whole:.3f})" for s, m in best[:12]))
        for m in (4096, 4096 + 512, 4096 + 1024, 2048):
            print(f"  r{m} {t[f'r{m}']:.1f} + r{M - m} {t[f'r{M - m}']:.1f}")
        # the k{n} entries (all rows, the first n columns) are in the JSON only
        del graphs
        torch.cuda.empty_cache()
    os.makedirs(f"{out}/s15a", exist_ok=True)
    with open(f"{out}/s15a/split_lab{os.environ.get('EAGER', '')}.json", "w") as f:
        json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
