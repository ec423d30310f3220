"""Where the time of ``ditron.nn``'s differentiable combine goes, one rank: host issue time
of its forward and of forward + backward (the GPU drained before each call, no sync after),
their wall time with the sync, a cProfile of the steps by function, and torch.profiler's
tables (host time by op, GPU time by
kernel) of a few forward + backward steps.

    PYTHONPATH=$PWD python bench/diag/nn_combine_profile.py [tokens] [calls]
"""
from __future__ import annotations

import cProfile
import io
import pstats
import sys
import time

import torch

import ditron


def _median_us(fn, calls: int, wait: bool) -> float:
    times = []
    for _ in range(calls):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        fn()
        if wait:
            torch.cuda.synchronize()
        times.append((time.perf_counter() - t0) * 1e6)
    return sorted(times)[len(times) // 2]


def profile(tokens: int, calls: int) -> str:
    from torch.profiler import ProfilerActivity
    from torch.profiler import profile as torch_profile

    from ditron.nn import moe as nn_moe

    dev = ditron.world().device
    hidden, experts, k = 7168, 64, 8
    g = torch.Generator(device=dev).manual_seed(tokens)
    x = torch.randn(tokens, hidden, device=dev, dtype=torch.bfloat16, generator=g)
    ids = torch.randint(0, experts, (tokens, k), device=dev, generator=g)
    wts = torch.rand(tokens, k, device=dev, generator=g).requires_grad_()
    d = ditron.ops.moe_dispatch(x, ids, experts)
    y = torch.randn_like(d.x).requires_grad_()
    grad = torch.randn_like(x)

    def forward():
        with torch.no_grad():
            nn_moe.moe_combine(y, d, wts)

    def step():
        y.grad = wts.grad = None
        nn_moe.moe_combine(y, d, wts).backward(grad)

    for _ in range(3):
        forward()
        step()
    lines = [f"tokens={tokens}: us per call, median of {calls} (host issue / with sync)"]
    for name, fn in (("forward", forward), ("forward+backward", step)):
        lines.append(f"  {name:18s} {_median_us(fn, calls, False):9.1f} "
                     f"{_median_us(fn, calls, True):9.1f}")
    prof = cProfile.Profile()
    prof.enable()
    for _ in range(calls):
        step()
    prof.disable()
    torch.cuda.synchronize()
    out = io.StringIO()
    pstats.Stats(prof, stream=out).sort_stats("tottime").print_stats(30)
    lines.append(f"cProfile of {calls} forward + backward steps, by own time:")
    lines.append(out.getvalue())
    torch.cuda.synchronize()
    with torch_profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as tp:
        for _ in range(5):
            step()
        torch.cuda.synchronize()
    table = tp.key_averages()
    lines.append("5 forward + backward steps, by self CPU time:")
    lines.append(table.table(sort_by="self_cpu_time_total", row_limit=25))
    lines.append("by GPU time:")
    lines.append(table.table(sort_by="self_device_time_total", row_limit=15))
    return "\n".join(lines)


if __name__ == "__main__":
    tokens = int(sys.argv[1]) if len(sys.argv) > 1 else 1024
    calls = int(sys.argv[2]) if len(sys.argv) > 2 else 20
    print(ditron.launch(profile, 1, tokens, calls, backend="cuda")[0])
