"""Host cost of launching the persistent GEMM, broken down (one GPU).

Prints the CPU microseconds per call of: ``torch.matmul``; an empty Triton kernel (one
pointer); the persistent GEMM through ``launch_gemm`` (TMA and pointer loads); the same
kernel launched with its arguments prebuilt (Triton's own launch cost); building the TMA
descriptors; then ``launch_gemm`` with TMA in alternating rounds with ``FastKernel``'s
descriptor encodings kept and not kept (the driver encodes every descriptor at every
launch, as Triton's launcher does), medians;
then a cProfile of ``launch_gemm`` (top entries by own time).

    python bench/gemm_launch_cost.py [--out DIR]
"""

from __future__ import annotations

import argparse
import cProfile
import io
import os
import pstats
import statistics
import time

import torch
import triton

from ditron.kernels import gemm as G


@triton.jit
def empty_kernel(x_ptr):
    pass


def host_us(fn, n: int = 300) -> float:
    for _ in range(10):
        fn()
    torch.cuda.synchronize()
    best = float("inf")
    for _ in range(3):
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        best = min(best, (time.perf_counter() - t0) * 1e6 / n)
        torch.cuda.synchronize()
    return best


class _EncodingEveryLaunch:
    """Within: the persistent GEMM's launchers as Triton builds them (each launch encodes
    its descriptors with the driver); the kept launchers are back after."""

    def __enter__(self):
        from ditron.runtime import triton_launch

        self.module, self.keep = triton_launch, triton_launch._encoding_cached
        self.entries = dict(G._GEMM._entries)
        triton_launch._encoding_cached = lambda launcher: launcher
        G._GEMM._entries.clear()

    def __exit__(self, *exc):
        self.module._encoding_cached = self.keep
        G._GEMM._entries.clear()
        G._GEMM._entries.update(self.entries)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--out", default=os.environ.get("OUT", "bench/results"))
    args = p.parse_args()
    os.makedirs(args.out, exist_ok=True)
    M, N, K = 1024, 1024, 1024  # small: the GPU never holds the host back
    a = torch.randn(M, K, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(N, K, device="cuda", dtype=torch.bfloat16).t()
    c = torch.empty(M, N, device="cuda", dtype=torch.bfloat16)
    cfg = G.GemmConfig()
    order = G.cached_linear_order(M, N, cfg, a.device)
    grid, gargs, gkw = G.gemm_launch(a, b, c, M, order=order, seg_rows=M, cfg=cfg)
    pgrid, pargs, pkw = G.gemm_launch(a, b, c, M, order=order, seg_rows=M, cfg=cfg,
                                      use_tma=False)
    rows = {
        "torch.matmul": lambda: torch.matmul(a, b, out=c),
        "empty triton kernel": lambda: empty_kernel[(1,)](c),
        "launch_gemm tma": lambda: G.launch_gemm(a, b, c, M, order=order, seg_rows=M, cfg=cfg),
        "launch_gemm ptr": lambda: G.launch_gemm(a, b, c, M, order=order, seg_rows=M, cfg=cfg,
                                                 use_tma=False),
        "tma_operands": lambda: G.tma_operands(a, b, cfg),
        "gemm_launch (args only)": lambda: G.gemm_launch(a, b, c, M, order=order, seg_rows=M,
                                                         cfg=cfg),
        "jit run, prebuilt tma": lambda: G.persistent_gemm[grid](*gargs, **gkw),
        "jit run, prebuilt ptr": lambda: G.persistent_gemm[pgrid](*pargs, **pkw),
        "matmul()": lambda: G.matmul(a, b),
    }
    lines = []
    for name, fn in rows.items():
        try:
            lines.append(f"{name:<24}{host_us(fn):8.1f} us/call")
        except Exception as exc:  # noqa: BLE001 - report and go on
            lines.append(f"{name:<24}failed: {type(exc).__name__}: {str(exc)[:400]}")
        print(lines[-1], flush=True)
    kept, every = [], []
    for _ in range(5):  # alternating rounds: the host's speed drifts between rows
        kept.append(host_us(rows["launch_gemm tma"]))
        with _EncodingEveryLaunch():
            every.append(host_us(rows["launch_gemm tma"]))
    for name, runs in (("tma, encodings kept", kept), ("tma, encoding every launch", every)):
        lines.append(f"launch_gemm {name:<27} median {statistics.median(runs):6.1f} us/call "
                     f"(rounds: {', '.join(f'{v:.1f}' for v in runs)})")
        print(lines[-1], flush=True)
    prof = cProfile.Profile()
    prof.enable()
    for _ in range(300):
        G.launch_gemm(a, b, c, M, order=order, seg_rows=M, cfg=cfg)
    prof.disable()
    torch.cuda.synchronize()
    s = io.StringIO()
    pstats.Stats(prof, stream=s).sort_stats("tottime").print_stats(30)
    text = "\n".join(lines) + "\n\n" + s.getvalue()
    with open(os.path.join(args.out, "gemm_launch_cost.txt"), "w") as f:
        f.write(text)
    print(s.getvalue()[:6000])


if __name__ == "__main__":
    main()
