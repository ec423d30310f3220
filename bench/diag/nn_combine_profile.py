"""Where the host and GPU time of ``ditron.nn``'s differentiable combine goes, one rank.

``step`` (default): host issue time of its forward and of forward + backward (the GPU
drained before each call, no sync after), their wall time with the sync, a cProfile of
the steps by function, and torch.profiler's tables (host time by op, GPU time by kernel)
of a few forward + backward steps. ``ops``: host issue time of the ops under it called
directly (``ditron.ops.moe``) against through their torch custom op
(``torch.ops.ditron``), what the custom-op layer costs per call, then a cProfile of the
direct calls.

    PYTHONPATH=$PWD python bench/diag/nn_combine_profile.py [tokens] [calls] [step|ops]
"""
from __future__ import annotations

import cProfile
import io
import pstats
import sys
import time

import torch

import ditron


def _median_us(fn, calls: int, wait: bool = False) -> float:
    times = []
    for _ in range(calls):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        fn()
        if wait:
            torch.cuda.synchronize()
        times.append((time.perf_counter() - t0) * 1e6)
    return sorted(times)[len(times) // 2]


def _cprofile(fn, calls: int, sort: str, rows: int) -> str:
    prof = cProfile.Profile()
    prof.enable()
    for _ in range(calls):
        fn()
    prof.disable()
    torch.cuda.synchronize()
    out = io.StringIO()
    pstats.Stats(prof, stream=out).sort_stats(sort).print_stats(rows)
    return out.getvalue()


def _inputs(tokens: int) -> dict:
    """A 64-expert, top-8 routing of ``tokens`` rows of 7168 bf16, dispatched."""
    dev = ditron.world().device
    hidden, experts, k = 7168, 64, 8
    g = torch.Generator(device=dev).manual_seed(tokens)
    x = torch.randn(tokens, hidden, device=dev, dtype=torch.bfloat16, generator=g)
    ids = torch.randint(0, experts, (tokens, k), device=dev, generator=g)
    wts = torch.rand(tokens, k, device=dev, generator=g)
    d = ditron.ops.moe_dispatch(x, ids, experts)
    return {"x": x, "wts": wts, "d": d, "y": torch.randn_like(d.x)}


def step(tokens: int, calls: int) -> str:
    from torch.profiler import ProfilerActivity
    from torch.profiler import profile as torch_profile

    from ditron.nn import moe as nn_moe

    t = _inputs(tokens)
    d, grad = t["d"], t["x"]
    y, wts = t["y"].requires_grad_(), t["wts"].requires_grad_()

    def forward():
        with torch.no_grad():
            nn_moe.moe_combine(y, d, wts)

    def one_step():
        y.grad = wts.grad = None
        nn_moe.moe_combine(y, d, wts).backward(grad)

    for _ in range(3):
        forward()
        one_step()
    lines = [f"tokens={tokens}: us per call, median of {calls} (host issue / with sync)"]
    for name, fn in (("forward", forward), ("forward+backward", one_step)):
        lines.append(f"  {name:18s} {_median_us(fn, calls):9.1f} "
                     f"{_median_us(fn, calls, True):9.1f}")
    lines.append(f"cProfile of {calls} forward + backward steps, by own time:")
    lines.append(_cprofile(one_step, calls, "tottime", 30))
    torch.cuda.synchronize()
    with torch_profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as tp:
        for _ in range(5):
            one_step()
        torch.cuda.synchronize()
    table = tp.key_averages()
    lines.append("5 forward + backward steps, by self CPU time:")
    lines.append(table.table(sort_by="self_cpu_time_total", row_limit=25))
    lines.append("by GPU time:")
    lines.append(table.table(sort_by="self_device_time_total", row_limit=15))
    return "\n".join(lines)


def ops(tokens: int, calls: int) -> str:
    from ditron.nn import library
    from ditron.ops import moe as ops_moe

    t = _inputs(tokens)
    x, wts, d, y = t["x"], t["wts"], t["d"], t["y"]
    routing, sizes = library.routing_of(d)
    key = library.world_key()
    lib = torch.ops.ditron
    pairs = {
        "send_tokens": (lambda: ops_moe.send_tokens(x, d, wts),
                        lambda: lib.moe_send_tokens(x, wts, routing, sizes, key)),
        "copy_dots": (lambda: ops_moe.copy_dots(y, d, x),
                      lambda: lib.moe_copy_dots(y, x, routing, sizes, key)),
        "combine": (lambda: ops_moe.combine_copies(y, d, wts),
                    lambda: lib.moe_combine(y, wts, routing, sizes, key)),
        "dispatch_of": (lambda: library.dispatch_of(y, routing, sizes), None),
    }
    lines = [f"tokens={tokens}: host issue time, us (median of {calls}): direct / custom op"]
    with torch.no_grad():
        for name, (direct, op) in pairs.items():
            for _ in range(3):
                direct()
                if op:
                    op()
            a = _median_us(direct, calls)
            b = _median_us(op, calls) if op else float("nan")
            lines.append(f"  {name:12s} {a:8.1f} {b:8.1f}")
        for name in ("send_tokens", "copy_dots"):
            lines.append(f"cProfile of {calls} direct {name} calls:\n"
                         + _cprofile(pairs[name][0], calls, "cumulative", 45))
    return "\n".join(lines)


if __name__ == "__main__":
    tokens = int(sys.argv[1]) if len(sys.argv) > 1 else 1024
    calls = int(sys.argv[2]) if len(sys.argv) > 2 else 20
    part = {"step": step, "ops": ops}[sys.argv[3] if len(sys.argv) > 3 else "step"]
    print(ditron.launch(part, 1, tokens, calls, backend="cuda")[0])
