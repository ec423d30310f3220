"""Host issue time of the combine's backward ops called through their torch custom op
(``torch.ops.ditron.*``) against the same ``ditron.ops.moe`` function called directly, one
rank, the GPU drained before each call: what the custom-op layer costs per call; then a
cProfile of the direct calls.

    PYTHONPATH=$PWD python bench/diag/custom_op_host.py [tokens] [calls]
"""
from __future__ import annotations

import cProfile
import io
import pstats
import sys
import time

import torch

import ditron


def _median_us(fn, calls: int) -> float:
    times = []
    for _ in range(calls):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1e6)
    return sorted(times)[len(times) // 2]


def measure(tokens: int, calls: int) -> str:
    from ditron.nn import library
    from ditron.ops import moe as ops_moe

    dev = ditron.world().device
    hidden, experts, k = 7168, 64, 8
    g = torch.Generator(device=dev).manual_seed(tokens)
    x = torch.randn(tokens, hidden, device=dev, dtype=torch.bfloat16, generator=g)
    ids = torch.randint(0, experts, (tokens, k), device=dev, generator=g)
    wts = torch.rand(tokens, k, device=dev, generator=g)
    d = ditron.ops.moe_dispatch(x, ids, experts)
    y = torch.randn_like(d.x)
    routing, sizes = library.routing_of(d)
    key = library.world_key()
    ops = torch.ops.ditron
    pairs = {
        "send_tokens": (lambda: ops_moe.send_tokens(x, d, wts),
                        lambda: ops.moe_send_tokens(x, wts, routing, sizes, key)),
        "copy_dots": (lambda: ops_moe.copy_dots(y, d, x),
                      lambda: ops.moe_copy_dots(y, x, routing, sizes, key)),
        "combine": (lambda: ops_moe.combine_copies(y, d, wts),
                    lambda: ops.moe_combine(y, wts, routing, sizes, key)),
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
            prof = cProfile.Profile()
            prof.enable()
            for _ in range(calls):
                pairs[name][0]()
            prof.disable()
            torch.cuda.synchronize()
            out = io.StringIO()
            pstats.Stats(prof, stream=out).sort_stats("cumulative").print_stats(45)
            lines.append(f"cProfile of {calls} direct {name} calls:\n{out.getvalue()}")
    return "\n".join(lines)


if __name__ == "__main__":
    tokens = int(sys.argv[1]) if len(sys.argv) > 1 else 1024
    calls = int(sys.argv[2]) if len(sys.argv) > 2 else 30
    print(ditron.launch(measure, 1, tokens, calls, backend="cuda")[0])
