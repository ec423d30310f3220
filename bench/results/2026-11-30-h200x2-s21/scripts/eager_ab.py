"""Eager copy-engine all-gather / reduce-scatter at one size under settings of
exchange.TAPER_MIN_BYTES: busy us per call (events between 20 back-to-back calls, after a
barrier, as `ditron bench collectives --busy`), the same with a GPU head start (device-only
time), host us per call; then rank-by-rank timelines of 3 head-started calls per setting."""

from __future__ import annotations

import json
import os
import statistics
import sys
import tempfile
import time

import torch
import torch.distributed as dist

import ditron

sys.path.insert(0, "bench")
from op_timeline import MARKER, _intervals  # noqa: E402

CALLS = 20
CYC = 1980


def busy(fn, group, head_ms=0.0):
    torch.cuda.synchronize()
    dist.barrier(group=group)
    if head_ms:
        torch.cuda._sleep(int(head_ms * 1000 * CYC))
    ev = [torch.cuda.Event(enable_timing=True) for _ in range(CALLS + 1)]
    t0 = time.perf_counter()
    ev[0].record()
    for i in range(CALLS):
        fn()
        ev[i + 1].record()
    host = (time.perf_counter() - t0) * 1e6 / CALLS
    ev[-1].synchronize()
    per = [a.elapsed_time(b) * 1e3 for a, b in zip(ev, ev[1:], strict=False)]
    return statistics.median(per), host


def body(sizes, tapers, timeline_size):
    from torch.profiler import ProfilerActivity, profile, record_function

    from ditron.ops import exchange
    from ditron.runtime.world import current

    w = ditron.world()
    group = current().host_group
    lines = []
    for nbytes in sizes:
        xa = torch.randn(nbytes // 2 // w.world_size, device=w.device).bfloat16()
        xr = torch.randn(nbytes // 2, device=w.device).bfloat16()
        fns = {"ag": lambda x=xa: ditron.ops.all_gather(x, engine="copy_engine"),
               "rs": lambda x=xr: ditron.ops.reduce_scatter(x, engine="copy_engine"),
               "nccl_ag": lambda x=xa, n=nbytes: dist.all_gather_into_tensor(
                   torch.empty(n // 2, dtype=torch.bfloat16, device=w.device), x),
               "nccl_rs": lambda x=xr, n=nbytes: dist.reduce_scatter_tensor(
                   torch.empty(n // 2 // w.world_size, dtype=torch.bfloat16,
                               device=w.device), x)}
        for rnd in range(3):
            for name, fn in fns.items():
                for t in (tapers if not name.startswith("nccl") else [0]):
                    if t:
                        exchange.TAPER_MIN_BYTES = t << 20
                    for _ in range(3):
                        fn()
                    b, _ = busy(fn, group)
                    hb, host = busy(fn, group, head_ms=20)
                    lines.append(f"r{rnd} rank {w.rank} {nbytes >> 20}M {name} t{t}: busy "
                                 f"{b:.1f} us, head-started {hb:.1f} us, host {host:.1f} us")
        if nbytes != timeline_size << 20:
            continue
        for name in ("ag", "rs"):
            for t in tapers:
                exchange.TAPER_MIN_BYTES = t << 20
                fn = fns[name]
                for _ in range(3):
                    fn()
                torch.cuda.synchronize()
                dist.barrier(group=group)
                with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
                    torch.cuda._sleep(int(10 * 1000 * CYC))
                    with record_function(MARKER):
                        for _ in range(3):
                            fn()
                    torch.cuda.synchronize()
                dist.barrier(group=group)
                with tempfile.TemporaryDirectory() as tmp:
                    path = os.path.join(tmp, "trace.json")
                    prof.export_chrome_trace(path)
                    with open(path) as f:
                        evs = _intervals(json.load(f))
                lines.append(f"== timeline rank {w.rank} {name} t{t} {nbytes >> 20}M: "
                             f"{len(evs)} activities")
                if not evs:
                    continue
                t0 = evs[0]["ts"]
                for e in evs:
                    lines.append(f"  s{e['stream']:<3} +{e['ts'] - t0:8.1f} {e['dur']:8.1f} us  "
                                 f"{e['name'][:60]}")
    exchange.TAPER_MIN_BYTES = 64 << 20
    return lines


if __name__ == "__main__":
    sizes = [int(s) << 20 for s in sys.argv[1].split(",")]
    tapers = [int(s) for s in sys.argv[2].split(",")]
    out = ditron.launch(body, 2, sizes, tapers, int(sys.argv[3]), backend="cuda")
    for lines in out:
        print("\n".join(lines))
