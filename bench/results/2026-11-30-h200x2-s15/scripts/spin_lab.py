"""s15i: one H200. cuBLAS's GEMM of one pulled-GEMM-RS chunk (rows x 4608 x 18432, bf16)
alone, and with a one-block kernel spinning on a side stream beside it (what a graph-safe
wait kernel does while the GEMM runs): us per GEMM, median of 15 (CUDA events)."""
from __future__ import annotations

import statistics

import torch

CYCLES_PER_US = 1980


def timed(fn, side: torch.cuda.Stream | None = None, spin_us: float = 0.0) -> float:
    """``fn``'s time; with ``side``, a ``spin_us`` one-block spin is queued there first."""
    out = []
    for _ in range(15):
        torch.cuda.synchronize()
        if side is not None:
            with torch.cuda.stream(side):
                torch.cuda._sleep(int(spin_us * CYCLES_PER_US))
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        fn()
        e.record()
        e.synchronize()
        out.append(s.elapsed_time(e) * 1e3)
    torch.cuda.synchronize()
    return statistics.median(out)


def main() -> None:
    side = torch.cuda.Stream()
    b = torch.randn(4608, 18432, device="cuda", dtype=torch.bfloat16).t()
    for rows in (4096, 2048, 1024):
        a = torch.randn(rows, 18432, device="cuda", dtype=torch.bfloat16)
        c = torch.empty(rows, 4608, device="cuda", dtype=torch.bfloat16)

        def gemm(a=a, c=c):
            torch.matmul(a, b, out=c)

        gemm()
        alone = timed(gemm)
        beside = timed(gemm, side, 2.5 * alone)
        print(f"rows {rows}: GEMM alone {alone:.1f} us; beside a spinning one-block kernel "
              f"{beside:.1f} us ({beside / alone:.2f}x)", flush=True)


if __name__ == "__main__":
    main()
