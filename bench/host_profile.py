"""Where an eager call's time goes: host time per call, device time per call (pipelined and
as the harness times it), and a torch.profiler table of a few calls, per op and engine.

    python bench/host_profile.py [--world-size 2] [--sizes 64M] [--out DIR]

Per implementation, on every rank with fixed counts (collectives must be called equally):
``host`` = wall time of 20 calls issued back to back without synchronising, per call (the
CPU cost when the device keeps up); ``pipelined`` = CUDA-event time of those 20 calls, per
call; ``isolated`` = median of single calls after a device sync and a host barrier (what
``ditron bench collectives`` reports). Rank 0 prints the rows and the profiler's
top entries by self CPU time, and writes a Chrome trace per implementation into ``--out``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

import torch
import torch.distributed as dist

import ditron
from ditron.benchmarks.collectives import _time
from ditron.runtime.torch_dist import all_gather_single, reduce_scatter_single


def _impls(size: int):
    w = ditron.world()
    numel = max(size // 2 // w.world_size, 1) * w.world_size
    x = torch.randn(numel, device=w.device).to(torch.bfloat16)
    part = x[: numel // w.world_size].clone()
    ops = ditron.ops
    out = []
    for eng in ("sm", "copy_engine"):
        out.append((f"all_gather/{eng}", lambda e=eng: ops.all_gather(part, engine=e)))
        out.append((f"reduce_scatter/{eng}", lambda e=eng: ops.reduce_scatter(x, engine=e)))
    out.append(("all_reduce/auto", lambda: ops.all_reduce(x)))
    dst = torch.empty_like(x)
    out.append(("all_gather/nccl", lambda: all_gather_single(dst, part)))
    rs = torch.empty_like(part)
    out.append(("reduce_scatter/nccl", lambda: reduce_scatter_single(rs, x)))
    buf = x.clone()
    out.append(("all_reduce/nccl", lambda: dist.all_reduce(buf)))
    return out


def _tp_impls(m: int, n: int, k: int):
    """AG-GEMM and GEMM-RS at global ``M = m`` (N / K split as ``ditron bench tp-gemm``)."""
    w = ditron.world()
    W, dev, dt = w.world_size, w.device, torch.bfloat16
    a = torch.randn(m // W, k, device=dev, dtype=dt)
    b = torch.randn(n // W, k, device=dev, dtype=dt).t()
    a_rs = torch.randn(m, k // W, device=dev, dtype=dt)
    b_rs = torch.randn(n, k // W, device=dev, dtype=dt).t()
    g = torch.empty(m, k, device=dev, dtype=dt)
    rs = torch.empty(m // W, n, device=dev, dtype=dt)
    ops = ditron.ops

    def base_ag():
        all_gather_single(g, a)
        return g @ b

    def base_rs():
        reduce_scatter_single(rs, a_rs @ b_rs)
        return rs

    return [("ag_gemm/auto", lambda: ops.ag_gemm(a, b)),
            ("ag_gemm/overlap", lambda: ops.ag_gemm(a, b, method="overlap")),
            ("ag_gemm/copy_engine_matmul",
             lambda: ops.ag_gemm(a, b, method="overlap", engine="copy_engine_matmul")),
            ("ag_gemm/baseline", base_ag), ("gemm_rs/auto", lambda: ops.gemm_rs(a_rs, b_rs)),
            ("gemm_rs/copy_engine",
             lambda: ops.gemm_rs(a_rs, b_rs, method="overlap", engine="copy_engine")),
            ("gemm_rs/copy_engine 4 chunks",
             lambda: ops.gemm_rs(a_rs, b_rs, method="overlap", engine="copy_engine",
                                 chunk_rows=-(-m // (4 * W)))),
            ("gemm_rs/copy_engine_pull",
             lambda: ops.gemm_rs(a_rs, b_rs, method="overlap", engine="copy_engine_pull")),
            ("gemm_rs/copy_engine_pull 4 chunks",
             lambda: ops.gemm_rs(a_rs, b_rs, method="overlap", engine="copy_engine_pull",
                                 chunk_rows=-(-m // (4 * W)))),
            ("gemm_rs/colocated",
             lambda: ops.gemm_rs(a_rs, b_rs, method="overlap", engine="colocated")),
            ("gemm_rs/baseline", base_rs),
            ("gemm_rs/gemm", lambda: a_rs @ b_rs),  # the local GEMM alone (T_gemm)
            # the graph-safe variants (what a CUDA graph replays), run eagerly
            ("gemm_rs/copy_engine_pull graph-safe",
             lambda: _graph_safe(ops.gemm_rs, a_rs, b_rs, engine="copy_engine_pull")),
            ("gemm_rs/copy_engine_pull 4 chunks graph-safe",
             lambda: _graph_safe(ops.gemm_rs, a_rs, b_rs, engine="copy_engine_pull",
                                 chunk_rows=-(-m // (4 * W)))),
            ("gemm_rs/copy_engine graph-safe",
             lambda: _graph_safe(ops.gemm_rs, a_rs, b_rs, engine="copy_engine"))]


def _graph_safe(op, a, b, **kw):
    with ditron.ops.graph_safe():
        return op(a, b, method="overlap", **kw)


def _measure(fn, calls: int = 20) -> tuple[float, float, float, float]:
    """(host, pipelined median, pipelined max, isolated) seconds per call."""
    from ditron.runtime.world import current

    group = current().host_group
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    dist.barrier(group=group)
    events = [torch.cuda.Event(enable_timing=True) for _ in range(calls + 1)]
    t0 = time.perf_counter()
    events[0].record()
    for i in range(calls):
        fn()
        events[i + 1].record()
    host = (time.perf_counter() - t0) / calls
    events[-1].synchronize()
    each = [a.elapsed_time(b) / 1e3 for a, b in zip(events, events[1:], strict=False)]
    single = _time(fn, 0, calls)  # the harness's isolated calls
    return host, statistics.median(each), max(each), single


def _cprofile(fn, rank: int, calls: int = 50) -> None:
    """The Python cost of ``calls`` calls on rank 0, by function (every rank calls)."""
    import cProfile
    import io
    import pstats

    torch.cuda.synchronize()
    prof = cProfile.Profile()
    if rank == 0:
        prof.enable()
    for _ in range(calls):
        fn()
    if rank == 0:
        prof.disable()
        text = io.StringIO()
        pstats.Stats(prof, stream=text).sort_stats("tottime").print_stats(25)
        print(text.getvalue(), flush=True)
    torch.cuda.synchronize()


def _run(sizes: list[int], tp: tuple[int, int, int] | None, out: str,
         cprofile: tuple[str, ...] = ()) -> None:
    from torch.profiler import ProfilerActivity, profile

    from ditron.ops.workspaces import release_workspaces

    rank = ditron.world().rank
    jobs = [(size, impl) for size in sizes for impl in _impls(size)]
    if tp:
        jobs += [(tp[0], impl) for impl in _tp_impls(*tp)]
    for size, (label, fn) in jobs:
        host, piped, worst, single = _measure(fn)
        if rank == 0:
            print(f"{label:<24}{size:>12} B  host {host * 1e6:8.1f} us  pipelined "
                  f"{piped * 1e6:8.1f} us (max {worst * 1e6:8.1f})  isolated "
                  f"{single * 1e6:8.1f} us", flush=True)
        if label in cprofile:
            _cprofile(fn, rank)
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            for _ in range(3):
                fn()
            torch.cuda.synchronize()
        if rank == 0:
            print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=14),
                  flush=True)
            prof.export_chrome_trace(os.path.join(out, f"{label.replace('/', '_')}_"
                                                       f"{size}.json"))
    release_workspaces()


def main() -> int:
    from ditron.runtime.config import parse_bytes

    p = argparse.ArgumentParser()
    p.add_argument("--world-size", type=int, default=None)
    p.add_argument("--sizes", default="64M")
    p.add_argument("--tp", default="8192,11008,4096", help="M,N,K of the TP GEMMs ('' skips)")
    p.add_argument("--cprofile", default="", help="labels to profile with cProfile (comma)")
    p.add_argument("--out", default="bench/results/host_profile")
    args = p.parse_args()
    os.makedirs(args.out, exist_ok=True)
    w = args.world_size or max(2, torch.cuda.device_count())
    tp = tuple(int(v) for v in args.tp.split(",")) if args.tp else None
    sizes = [parse_bytes(s) for s in args.sizes.split(",") if s]
    ditron.launch(_run, w, sizes, tp, args.out, tuple(args.cprofile.split(",")),
                  backend="cuda")
    return 0


if __name__ == "__main__":
    sys.exit(main())
