"""Where the host time of an eager MoE layer goes (ditron.ops: dispatch, two grouped GEMMs,
combine): per-call host issue time of each op, a cProfile of the layer (by cumulative time), and
torch.profiler's host time of the dispatch and the combine by aten op.

    PYTHONPATH=$PWD python bench/diag/moe_host_profile.py [cuda|cpu] [tokens] [calls]
"""
from __future__ import annotations

import cProfile
import io
import pstats
import sys
import time

import torch

import ditron


def profile(tokens: int, calls: int) -> str:
    w = ditron.world()
    dev, W = w.device, w.world_size
    hidden, ffn, experts, k = (7168, 2048, 64, 8) if dev.type == "cuda" else (64, 32, 4, 2)
    g = torch.Generator().manual_seed(w.rank)
    x = torch.randn(tokens, hidden, generator=g).to(dev, torch.bfloat16)
    ids = torch.rand(tokens, experts, generator=g).topk(k, dim=1).indices.to(dev)
    wts = torch.rand(tokens, k, generator=g).to(dev)
    w1 = torch.randn(experts // W, hidden, ffn, generator=g).to(dev, torch.bfloat16)
    w2 = torch.randn(experts // W, ffn, hidden, generator=g).to(dev, torch.bfloat16)
    sync = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)
    state = {}

    def dispatch():
        state["d"] = ditron.ops.moe_dispatch(x, ids, experts)

    def gemm1():
        state["h"] = ditron.ops.grouped_gemm(state["d"].x, w1, state["d"].expert_offsets)

    def gemm2():
        state["y"] = ditron.ops.grouped_gemm(state["h"], w2, state["d"].expert_offsets)

    def combine():
        state["o"] = ditron.ops.moe_combine(state["y"], state["d"], wts)

    steps = {"moe_dispatch": dispatch, "grouped_gemm 1": gemm1, "grouped_gemm 2": gemm2,
             "moe_combine": combine}
    for _ in range(3):
        for fn in steps.values():
            fn()
    sync()
    lines = [f"W={W} tokens={tokens} {dev.type}: host issue time per call (us, median of "
             f"{calls}, the GPU drained before each)"]
    for name, fn in steps.items():
        times = []
        for _ in range(calls):
            sync()
            t0 = time.perf_counter()
            fn()
            times.append((time.perf_counter() - t0) * 1e6)
        times.sort()
        lines.append(f"  {name:16s} {times[len(times) // 2]:9.1f}")
    sync()
    prof = cProfile.Profile()
    prof.enable()
    for _ in range(calls):
        for fn in steps.values():
            fn()
    prof.disable()
    sync()
    out = io.StringIO()
    pstats.Stats(prof, stream=out).sort_stats("cumulative").print_stats(40)
    lines.append(out.getvalue())
    from torch.profiler import ProfilerActivity
    from torch.profiler import profile as torch_profile

    for name in ("moe_dispatch", "moe_combine"):  # host time by aten op and runtime call
        with torch_profile(activities=[ProfilerActivity.CPU]) as tp:
            for _ in range(calls):
                steps[name]()
        sync()
        lines.append(f"{name}, {calls} calls, by self CPU time:")
        lines.append(tp.key_averages().table(sort_by="self_cpu_time_total", row_limit=30))
    return "\n".join(lines)


if __name__ == "__main__":
    backend = sys.argv[1] if len(sys.argv) > 1 else "cuda"
    tokens = int(sys.argv[2]) if len(sys.argv) > 2 else 128
    calls = int(sys.argv[3]) if len(sys.argv) > 3 else 50
    print(ditron.launch(profile, 1, tokens, calls, backend=backend)[0])
