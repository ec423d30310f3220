"""How much a running GEMM slows the copy engines (and the other way round).

One process sees two GPUs. On each GPU a cuBLAS GEMM (``--gemm M,N,K``, bf16) runs on one
stream while the copy engines move ``--size`` bytes on another: to the peer (both GPUs
push at once, as an overlapped AG-GEMM / GEMM-RS does), or within the GPU (device to
device, no link: the copy competes for memory only). Each copy is timed alone and beside the
GEMM, and the GEMM alone and beside each copy; fixed counts, CUDA events, medians.

    python bench/copy_under_gemm.py [--size 32M] [--gemm 8192,5504,4096]
"""

from __future__ import annotations

import argparse
import statistics

import torch


def _parse_bytes(text: str) -> int:
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    return int(text[:-1]) * units[text[-1]] if text[-1] in units else int(text)


def _timed(jobs, warmup: int = 3, iters: int = 10) -> dict[str, float]:
    """Median microseconds of each named job when all are issued together; ``jobs`` maps a
    name to ``(stream, fn)``."""
    streams = {name: s for name, (s, _) in jobs.items()}
    samples: dict[str, list[float]] = {name: [] for name in jobs}
    for it in range(warmup + iters):
        for s in streams.values():
            s.synchronize()
        ev = {}
        for name, (s, fn) in jobs.items():
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            with torch.cuda.stream(s):
                start.record(s)
                fn()
                end.record(s)
            ev[name] = (start, end)
        for s in streams.values():
            s.synchronize()
        if it >= warmup:
            for name, (a, b) in ev.items():
                samples[name].append(a.elapsed_time(b) * 1e3)
    return {name: statistics.median(v) for name, v in samples.items()}


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--size", default="32M")
    p.add_argument("--gemm", default="8192,5504,4096", help="M,N,K of the GEMM per GPU")
    args = p.parse_args()
    if torch.cuda.device_count() < 2:
        raise SystemExit("copy_under_gemm needs two GPUs in one process")
    nbytes = _parse_bytes(args.size)
    M, N, K = (int(v) for v in args.gemm.split(","))
    gpus = (0, 1)
    a = {g: torch.randn(M, K, device=g, dtype=torch.bfloat16) for g in gpus}
    b = {g: torch.randn(K, N, device=g, dtype=torch.bfloat16) for g in gpus}
    c = {g: torch.empty(M, N, device=g, dtype=torch.bfloat16) for g in gpus}
    src = {g: torch.empty(nbytes, device=g, dtype=torch.uint8) for g in gpus}
    dst = {g: torch.empty(nbytes, device=g, dtype=torch.uint8) for g in gpus}
    mm_s = {g: torch.cuda.Stream(device=g) for g in gpus}
    cp_s = {g: torch.cuda.Stream(device=g) for g in gpus}

    def gemm(g):
        return lambda: torch.matmul(a[g], b[g], out=c[g])

    def push(g):
        return lambda: dst[1 - g].copy_(src[g], non_blocking=True)

    def local(g):
        return lambda: dst[g].copy_(src[g], non_blocking=True)

    rows = []
    base_gemm = _timed({f"gemm{g}": (mm_s[g], gemm(g)) for g in gpus})
    for kind, make in (("peer push, both GPUs", push), ("device-to-device", local)):
        alone = _timed({f"copy{g}": (cp_s[g], make(g)) for g in gpus})
        both = _timed({**{f"gemm{g}": (mm_s[g], gemm(g)) for g in gpus},
                       **{f"copy{g}": (cp_s[g], make(g)) for g in gpus}})
        for g in gpus:
            rows.append((kind, g, alone[f"copy{g}"], both[f"copy{g}"], base_gemm[f"gemm{g}"],
                         both[f"gemm{g}"]))
    print(f"copy {nbytes / 2**20:.0f} MiB, GEMM {M}x{N}x{K} bf16; us (median of 10)")
    print(f"{'copy':<22}{'gpu':>4}{'copy alone':>12}{'copy+gemm':>11}{'GB/s':>14}"
          f"{'gemm alone':>12}{'gemm+copy':>11}")
    for kind, g, ca, cb, ga, gb in rows:
        gbs = f"{nbytes / ca / 1e3:.0f} -> {nbytes / cb / 1e3:.0f}"
        print(f"{kind:<22}{g:>4}{ca:12.1f}{cb:11.1f}{gbs:>14}{ga:12.1f}{gb:11.1f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
