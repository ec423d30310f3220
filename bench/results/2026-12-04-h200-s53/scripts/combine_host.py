"""s53d: host time of the eager MoE combine (``ditron.ops.moe.combine_copies``) and of
``moe_dispatch``, one rank on cuda, 1024 tokens of 7168, top-8 of 64: per call the CPU
microseconds to issue it (no synchronisation inside; median of 50 after 10 warm-up), the
GPU time per call with the host hidden (100 calls between two events) and alone (events
around one call after a sync; median of 30), and a cProfile of 50 calls by own time. Runs
on whichever tree is first on PYTHONPATH (session 49's or this one)."""

from __future__ import annotations

import cProfile
import io
import pstats
import statistics
import time

import torch

import ditron


def _host_us(fn, n=50):
    out = []
    for _ in range(n):
        t0 = time.perf_counter()
        fn()
        out.append((time.perf_counter() - t0) * 1e6)
        torch.cuda.synchronize()
    return statistics.median(out)


def _alone_us(fn, n=30):
    out = []
    for _ in range(n):
        torch.cuda.synchronize()
        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        e0.record()
        fn()
        e1.record()
        e1.synchronize()
        out.append(e0.elapsed_time(e1) * 1000)
    return statistics.median(out)


def _stream_us(fn, n=100):
    torch.cuda.synchronize()
    e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    e0.record()
    for _ in range(n):
        fn()
    e1.record()
    e1.synchronize()
    return e0.elapsed_time(e1) * 1000 / n


def _measure(tokens: int) -> str:
    from ditron.ops import moe as ops_moe

    dev = ditron.world().device
    g = torch.Generator(device=dev).manual_seed(tokens)
    x = torch.randn(tokens, 7168, device=dev, dtype=torch.bfloat16, generator=g)
    ids = torch.randint(0, 64, (tokens, 8), device=dev, generator=g)
    wts = torch.rand(tokens, 8, device=dev, generator=g)
    d = ditron.ops.moe_dispatch(x, ids, 64)
    y = torch.randn_like(d.x)
    calls = {"combine": lambda: ops_moe.combine_copies(y, d, wts),
             "dispatch": lambda: ditron.ops.moe_dispatch(x, ids, 64)}
    lines = []
    with torch.no_grad():
        for name, fn in calls.items():
            for _ in range(10):
                fn()
            torch.cuda.synchronize()
            lines.append(f"{name} {tokens}: host {_host_us(fn):.1f} us, alone "
                         f"{_alone_us(fn):.1f} us, back to back {_stream_us(fn):.1f} us")
        prof = cProfile.Profile()
        prof.enable()
        for _ in range(50):
            calls["combine"]()
        torch.cuda.synchronize()
        prof.disable()
    s = io.StringIO()
    pstats.Stats(prof, stream=s).sort_stats("tottime").print_stats(25)
    return "\n".join(lines) + "\ncombine, 50 calls, by own time:\n" + s.getvalue()


if __name__ == "__main__":
    for tokens in (1024, 128):
        print(ditron.launch(_measure, 1, tokens, backend="cuda")[0], flush=True)
