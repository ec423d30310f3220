"""GPU timeline of the graph-safe copy-engine all-gather (push / pull) and reduce-scatter at
one size, replayed from a CUDA graph of 4 calls under torch.profiler; per rank, every
activity of the first two calls by stream, and the per-call span."""

from __future__ import annotations

import json
import os
import sys
import tempfile

import torch
import torch.distributed as dist

import ditron

sys.path.insert(0, "bench")
from op_timeline import MARKER, _intervals  # noqa: E402

BATCH = 4


def body(nbytes: int, labels: list[str]) -> list[str]:
    from torch.profiler import ProfilerActivity, profile, record_function

    from ditron.ops import exchange
    from ditron.ops.graphs import capture
    from ditron.runtime.world import current

    w = ditron.world()
    group = current().host_group
    n = nbytes // 2 // w.world_size
    x = torch.randn(n, device=w.device).bfloat16()
    xr = torch.randn(2 * n, device=w.device).bfloat16()
    from ditron.engines import copy_engine

    ag = lambda: ditron.ops.all_gather(x, engine="copy_engine")  # noqa: E731
    rs = lambda: ditron.ops.reduce_scatter(xr, engine="copy_engine")  # noqa: E731
    lines = []
    for label in labels:
        # label: OP-BY-LANES[-s][-p0], e.g. "ag-push-1-s": pushes, one lane, signal lane
        parts = label.split("-")
        op, by, lanes = parts[:3]
        sig, prio = "s" in parts[3:], 0 if "p0" in parts[3:] else -8
        fn0 = ag if op == "ag" else rs

        def fn(by=by, lanes=int(lanes), sig=sig, prio=prio, fn0=fn0):
            exchange.GATHER_BY, exchange.PUSH_LANES = by, lanes
            exchange.PUSH_SIGNAL_LANE, copy_engine.PRIORITY = sig, prio
            return fn0()
        g = capture(fn, BATCH)
        g.replay()
        torch.cuda.synchronize()
        dist.barrier(group=group)
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            g.replay()
            torch.cuda.synchronize()
            dist.barrier(group=group)
            with record_function(MARKER):
                start.record()
                g.replay()
                end.record()
            torch.cuda.synchronize()
        dist.barrier(group=group)
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "trace.json")
            prof.export_chrome_trace(path)
            with open(path) as f:
                evs = _intervals(json.load(f))
        per_call = start.elapsed_time(end) * 1e3 / BATCH
        lines.append(f"== rank {w.rank} {label}: {per_call:.1f} us per call, "
                     f"{len(evs)} activities")
        if not evs:
            continue
        t0 = evs[0]["ts"]
        for e in evs:
            if e["ts"] - t0 > 2.2 * per_call:
                break
            lines.append(f"  s{e['stream']:<3} +{e['ts'] - t0:8.1f} {e['dur']:8.1f} us  "
                         f"{e['name'][:60]}")
    return lines


if __name__ == "__main__":
    labels = sys.argv[2].split(",")
    out = ditron.launch(body, 2, int(sys.argv[1]) if len(sys.argv) > 1 else 1 << 30, labels,
                        backend="cuda")
    for lines in out:
        print("\n".join(lines))
