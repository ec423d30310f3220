"""Host time from an eager GEMM-RS call's entry to its first GEMM launch (``torch.matmul``
patched to note the time), and the whole call's host time, per engine; the GPU sleeps
first so the host never waits. The bench's per-call time includes this prologue / batch."""
from __future__ import annotations

import statistics
import sys
import time

import torch
import torch.distributed as dist

import ditron
from ditron.runtime.world import current


def case(m: int, n: int, k: int, calls: int) -> dict:
    w = ditron.world()
    W, dev = w.world_size, w.device
    dt = torch.bfloat16 if dev.type == "cuda" else torch.float32
    a = torch.randn(m, k // W, device=dev, dtype=dt)
    b = torch.randn(n, k // W, device=dev, dtype=dt).t()
    first: list[float] = []
    real = torch.matmul

    def noted(*args, **kwargs):
        if not first:
            first.append(time.perf_counter())
        return real(*args, **kwargs)

    impls = {
        "pull": lambda: ditron.ops.gemm_rs(a, b, method="overlap", engine="copy_engine_pull"),
        "push": lambda: ditron.ops.gemm_rs(a, b, method="overlap", engine="copy_engine"),
        "fallback": lambda: ditron.ops.gemm_rs(a, b, method="fallback"),
        "matmul": lambda: torch.matmul(a, b),
    }
    out = {}
    for name, f in impls.items():
        for _ in range(3):
            f()
        if dev.type == "cuda":
            torch.cuda.synchronize()
        dist.barrier(group=current().host_group)
        if dev.type == "cuda":
            torch.cuda._sleep(int(60e3 * 1980))
        pro, tot = [], []
        torch.matmul = noted
        try:
            for _ in range(calls):
                first.clear()
                t0 = time.perf_counter()
                f()
                t1 = time.perf_counter()
                pro.append((first[0] - t0) * 1e6 if first else float("nan"))
                tot.append((t1 - t0) * 1e6)
        finally:
            torch.matmul = real
        if dev.type == "cuda":
            torch.cuda.synchronize()
        out[name] = (round(statistics.median(pro), 1), round(statistics.median(tot), 1))
    if w.rank == 0 and len(sys.argv) > 3:  # where the pulled call's host time goes
        import cProfile
        import io
        import pstats

        f = impls["pull"]
        pr = cProfile.Profile()
        if dev.type == "cuda":
            torch.cuda._sleep(int(60e3 * 1980))
        pr.enable()
        for _ in range(40):
            f()
        pr.disable()
        text = io.StringIO()
        pstats.Stats(pr, stream=text).sort_stats("tottime").print_stats(30)
        out["profile"] = text.getvalue()
    else:
        for _ in range(40):
            impls["pull"]()
    return out


if __name__ == "__main__":
    shape = [int(x) for x in (sys.argv[1] if len(sys.argv) > 1 else "8192,4096,11008").split(",")]
    backend = sys.argv[2] if len(sys.argv) > 2 else "cuda"
    res = ditron.launch(case, 2, *shape, 15, backend=backend)
    print(res[0].pop("profile", ""))
    for rank, row in enumerate(res):
        print(f"rank {rank}: host us (to first GEMM, whole call) {row}")
