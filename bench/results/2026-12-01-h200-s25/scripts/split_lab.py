"""Uneven chunks for the pulled GEMM-RS at W = 2 (session 25 lab, one GPU).

One rank computes the peer's segment in chunks (r, seg - r) rows, then its own segment in the
same chunks with addmm (what ``_rs_pulled`` queues on its compute stream, signals left out).
Per-call time (CUDA events, a batch queued behind a sleep) for each r, against the whole GEMM.
"""
from __future__ import annotations

import argparse
import statistics

import torch


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--shapes", default="4096,5504;4096,7168;3584,7168;4608,18432")
    p.add_argument("--M", type=int, default=8192)
    p.add_argument("--step", type=int, default=128)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--rounds", type=int, default=5)
    args = p.parse_args()
    dev = torch.device("cuda")
    M = args.M
    seg = M // 2
    for shape in args.shapes.split(";"):
        N, K = map(int, shape.split(","))
        a = torch.randn(M, K, device=dev, dtype=torch.bfloat16)
        b = torch.randn(N, K, device=dev, dtype=torch.bfloat16).t()
        slots = torch.empty(seg, N, device=dev, dtype=torch.bfloat16)
        out = torch.zeros(seg, N, device=dev, dtype=torch.bfloat16)
        whole = torch.empty(M, N, device=dev, dtype=torch.bfloat16)

        def call(bounds, a=a, b=b, slots=slots, out=out):
            for lo, hi in bounds:
                torch.matmul(a[lo:hi], b, out=slots[lo:hi])
            for lo, hi in bounds:
                out[lo:hi].addmm_(a[seg + lo:seg + hi], b)

        variants = {"whole": lambda a=a, b=b, whole=whole: torch.matmul(a, b, out=whole)}
        for r in range(args.step, seg, args.step):
            variants[r] = (lambda bd, call=call: (lambda: call(bd)))(((0, r), (r, seg)))
        variants["3 equal"] = lambda call=call: call(((0, seg // 3), (seg // 3, 2 * seg // 3),
                                                      (2 * seg // 3, seg)))

        def timed(fn):
            torch.cuda.synchronize()
            torch.cuda._sleep(20_000_000)
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            s.record()
            for _ in range(args.batch):
                fn()
            e.record()
            e.synchronize()
            return s.elapsed_time(e) * 1e3 / args.batch

        for fn in variants.values():
            fn()
        names = list(variants)
        t = {n: [] for n in names}
        for r in range(args.rounds):
            for n in names[r % len(names):] + names[:r % len(names)]:
                t[n].append(timed(variants[n]))
        med = {n: statistics.median(v) for n, v in t.items()}
        w = med["whole"]
        half = med.get(seg // 2)
        print(f"N={N} K={K} M={M}: whole {w:.1f} us; halves (r={seg // 2}) {half:.1f} "
              f"({w / half:.3f}x whole's speed); 3 equal {med['3 equal']:.1f}", flush=True)
        ranked = sorted((n for n in names if isinstance(n, int)), key=lambda n: med[n])
        for n in ranked[:6]:
            print(f"   r={n:5d} ({n}, {seg - n}): {med[n]:.1f} us ({w / med[n]:.3f}x)")
        print("   all: " + " ".join(f"{n}:{med[n]:.0f}" for n in names if isinstance(n, int)),
              flush=True)


if __name__ == "__main__":
    main()
