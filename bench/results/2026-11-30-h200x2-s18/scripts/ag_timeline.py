"""GPU timeline of the copy-engine all-gather (push / pull) and reduce-scatter at one size:
4 eager calls back to back after a GPU head start (the host queues them while the GPU
sleeps), torch.profiler; per rank, every activity of the second call by stream, and the
per-call span."""

from __future__ import annotations

import json
import os
import sys
import tempfile

import torch
import torch.distributed as dist

import ditron

sys.path.insert(0, "bench")  # run from the repository root
from op_timeline import CYCLES_PER_US, MARKER, _intervals  # noqa: E402

BATCH = 4


def body(nbytes: int) -> list[str]:
    from torch.profiler import ProfilerActivity, profile, record_function

    from ditron.ops import exchange
    from ditron.runtime.world import current

    w = ditron.world()
    group = current().host_group
    n = nbytes // 2 // w.world_size
    x = torch.randn(n, device=w.device).bfloat16()
    xr = torch.randn(2 * n, device=w.device).bfloat16()
    impls = {
        "ag push": ("push", lambda: ditron.ops.all_gather(x, engine="copy_engine")),
        "ag pull": ("pull", lambda: ditron.ops.all_gather(x, engine="copy_engine")),
        "rs": ("pull", lambda: ditron.ops.reduce_scatter(xr, engine="copy_engine")),
    }
    lines = []
    for label, (by, fn) in impls.items():
        exchange.GATHER_BY = by
        for _ in range(3):
            fn()
        torch.cuda.synchronize()
        dist.barrier(group=group)
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            fn()
            torch.cuda.synchronize()
            dist.barrier(group=group)
            with record_function(MARKER):
                torch.cuda._sleep(int(3000 * CYCLES_PER_US))
                start.record()
                for _ in range(BATCH):
                    fn()
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
    out = ditron.launch(body, 2, int(sys.argv[1]) if len(sys.argv) > 1 else 1 << 30,
                        backend="cuda")
    for lines in out:
        print("\n".join(lines))
