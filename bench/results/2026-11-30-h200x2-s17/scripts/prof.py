"""s17b: host time per eager call of the copy-engine all-gather / reduce-scatter (64 MB,
bf16, 2 ranks): issue time of 20 calls without a sync, GPU time of the same 20 (events),
then a cProfile of 20 calls on rank 0 (top functions by own time)."""
import cProfile
import io
import os
import pstats
import sys
import time

import torch

import ditron


def body(op, nbytes, engine):
    w = ditron.world()
    n = nbytes // 2
    if op == "all_gather":
        x = torch.randn(n // w.world_size, device=w.device).bfloat16()
        call = lambda: ditron.ops.all_gather(x, engine=engine)  # noqa: E731
    else:
        x = torch.randn(n, device=w.device).bfloat16()
        call = lambda: ditron.ops.reduce_scatter(x, engine=engine)  # noqa: E731
    for _ in range(5):
        call()
    ditron.world().device.type == "cuda" and torch.cuda.synchronize()
    ditron.barrier()
    res = []
    seg0 = torch.cuda.memory_stats().get("segment.all.allocated", 0)
    for _ in range(3):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        t0 = time.perf_counter()
        for _ in range(20):
            call()
        t1 = time.perf_counter()
        e.record()
        e.synchronize()
        res.append(((t1 - t0) * 1e6 / 20, s.elapsed_time(e) * 1e3 / 20))
        ditron.barrier()
    stats = torch.cuda.memory_stats()
    res.append((stats.get("segment.all.allocated", 0) - seg0, stats.get("num_alloc_retries", 0)))
    prof = cProfile.Profile()
    prof.enable()
    for _ in range(20):
        call()
    prof.disable()
    ditron.world().device.type == "cuda" and torch.cuda.synchronize()
    out = io.StringIO()
    pstats.Stats(prof, stream=out).sort_stats("tottime").print_stats(28)
    return res, out.getvalue()


if __name__ == "__main__":
    for op, size, engine in [("all_gather", 64 << 20, "copy_engine"),
                             ("reduce_scatter", 64 << 20, "copy_engine"),
                             ("all_gather", 64 << 20, "sm")]:
        r = ditron.launch(body, 2, op, size, engine, backend=os.environ.get("B", "cuda"))
        for rank, (res, _) in enumerate(r):
            print(f"== {op} {engine} 64M rank {rank}: (host issue us/call, gpu us/call) x3: "
                  + ", ".join(f"({a:.1f}, {b:.1f})" for a, b in res), flush=True)
        print(r[0][1], flush=True)
    sys.exit(0)
