"""Host cost of eager TP-GEMM calls on GPUs, by function (cProfile, rank 0).

Small shapes (M = 1024), so the GPU keeps up and wall time per call is host time. Per
implementation: un-profiled host us per call (40 calls issued back to back, then one
sync), then cProfile of 40 calls sorted by own time and by cumulative time (Ditron only).

    python bench/results/2026-11-30-h200x2-s13/scripts/host_gpu_profile.py [op/engine ...]
"""

from __future__ import annotations

import cProfile
import io
import os
import pstats
import sys
import time

import torch
import torch.distributed as dist

import ditron

IMPLS = ["gemm_rs/copy_engine_pull", "gemm_rs/copy_engine", "gemm_rs/colocated",
         "ag_gemm/copy_engine", "gemm_rs/baseline"]


def _sync() -> None:
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def case(impls: list[str]) -> str:
    w = ditron.world()
    torch.manual_seed(w.rank)
    M, N, K = (1024, 512, 256) if w.device.type == "cuda" else (64, 32, 32)
    a = torch.randn(M, K, device=w.device, dtype=torch.bfloat16)
    b = torch.randn(N, K, device=w.device, dtype=torch.bfloat16).t()
    a_ag = torch.randn(M // w.world_size, K, device=w.device, dtype=torch.bfloat16)
    out = []
    for impl in impls:
        op, engine = impl.split("/")
        if op == "gemm_rs" and engine == "baseline":
            def fn():
                return ditron.ops.gemm_rs(a, b, method="fallback")
        elif op == "gemm_rs":
            def fn(e=engine):
                return ditron.ops.gemm_rs(a, b, method="overlap", engine=e)
        else:
            def fn():
                return ditron.ops.ag_gemm(a_ag, b, method="overlap")
        for _ in range(5):
            fn()
        _sync()
        dist.barrier()
        n = 40
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        host = (time.perf_counter() - t0) * 1e6 / n
        _sync()
        dist.barrier()
        prof = cProfile.Profile()
        prof.enable()
        for _ in range(n):
            fn()
        prof.disable()
        _sync()
        dist.barrier()
        s = io.StringIO()
        st = pstats.Stats(prof, stream=s)
        st.sort_stats("tottime").print_stats(25)
        st.sort_stats("cumulative").print_stats(r"ditron", 30)
        out.append(f"== {impl}: {host:.1f} us host per call (not profiled)\n{s.getvalue()}")
    return "\n".join(out)


if __name__ == "__main__":
    impls = sys.argv[1:] or IMPLS
    print(ditron.launch(case, 2, impls, backend=os.environ.get("LAB_BACKEND", "cuda"))[0])
