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
import ditron.kernels.gather_sum


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
    def median_us(fn) -> float:
        times = []
        for _ in range(calls):
            sync()
            t0 = time.perf_counter()
            fn()
            times.append((time.perf_counter() - t0) * 1e6)
        return sorted(times)[len(times) // 2]

    for name, fn in steps.items():
        lines.append(f"  {name:16s} {median_us(fn):9.1f}")
    lines.append("parts (us, median): " + ", ".join(
        f"{name} {median_us(fn):.1f}" for name, fn in _parts(state, w1, ids, experts).items()))
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


def _parts(state: dict, w1: torch.Tensor, ids: torch.Tensor, experts: int) -> dict:
    """Pieces of the grouped GEMM's and the dispatch's host work, each timed alone."""
    from ditron.kernels import grouped_gemm as gg
    from ditron.kernels import routing
    from ditron.ops.a2a_device import exchange_counts

    d = state["d"]
    x, offsets = d.x, d.expert_offsets
    cfg = gg.default_config(x.device, x.dtype)
    W = ditron.world().world_size
    copies = routing.sort_copies(ids, experts, W)
    return {
        "torch.empty": lambda: torch.empty((x.shape[0], w1.shape[2]), dtype=x.dtype,
                                           device=x.device),
        "check_grouped": lambda: gg.check_grouped("p", x, w1, offsets),
        "default_config": lambda: gg.default_config(x.device, x.dtype),
        "descriptors": lambda: gg._descriptors(x, w1, cfg),
        "kernels.grouped_gemm": lambda: gg.grouped_gemm(x, w1, offsets),
        "ops.grouped_gemm": lambda: ditron.ops.grouped_gemm(x, w1, offsets),
        "sort_copies": lambda: routing.sort_copies(ids, experts, W),
        "exchange_counts": lambda: exchange_counts(copies.counts.view(W, -1)),
        "group_received": lambda: routing.group_received(copies.counts.view(W, -1), d.capacity),
        "gather_sum": lambda: ditron.kernels.gather_sum.weighted_gather_sum(
            state["y"], torch.zeros(ids.shape, dtype=torch.int64, device=x.device)),
    }


if __name__ == "__main__":
    backend = sys.argv[1] if len(sys.argv) > 1 else "cuda"
    tokens = int(sys.argv[2]) if len(sys.argv) > 2 else 128
    calls = int(sys.argv[3]) if len(sys.argv) > 3 else 50
    print(ditron.launch(profile, 1, tokens, calls, backend=backend)[0])
