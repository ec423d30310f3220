"""Host us per call (GPU head start, median of 5 batches of 20) and busy us per call of the
eager copy-engine all-gather / reduce-scatter with and without the landing kernel; then
rank 0's cProfile of 20 head-started calls of each landed variant."""

from __future__ import annotations

import cProfile
import io
import pstats
import statistics
import sys
import time

import torch
import torch.distributed as dist

import ditron

CALLS = 20
CYC = 1980


def measure(fn, group):
    hosts, busys = [], []
    for _ in range(5):
        torch.cuda.synchronize()
        dist.barrier(group=group)
        torch.cuda._sleep(int(30 * 1000 * CYC))
        t0 = time.perf_counter()
        for _ in range(CALLS):
            fn()
        hosts.append((time.perf_counter() - t0) * 1e6 / CALLS)
        torch.cuda.synchronize()
        dist.barrier(group=group)
        ev = [torch.cuda.Event(enable_timing=True) for _ in range(CALLS + 1)]
        ev[0].record()
        for i in range(CALLS):
            fn()
            ev[i + 1].record()
        ev[-1].synchronize()
        busys += [a.elapsed_time(b) * 1e3 for a, b in zip(ev, ev[1:], strict=False)]
    return statistics.median(hosts), min(hosts), statistics.median(busys)


def body(nbytes, chunk_mb):
    from ditron.ops import exchange as E
    from ditron.runtime.world import current

    w = ditron.world()
    group = current().host_group
    xa = torch.randn(nbytes // 2 // w.world_size, device=w.device).bfloat16()
    xr = torch.randn(nbytes // 2, device=w.device).bfloat16()
    lines = []
    fns = {}
    for land in (False, True):
        def setup(land=land):
            E.LANDING = land
            E.LANDING_CHUNK_BYTES = chunk_mb << 20
        tag = f"land{chunk_mb}" if land else "base"
        fns[f"ag {tag}"] = lambda s=setup: (
            s(), ditron.ops.all_gather(xa, engine="copy_engine"))
        fns[f"rs {tag}"] = lambda s=setup: (
            s(), ditron.ops.reduce_scatter(xr, engine="copy_engine"))
    for name, fn in fns.items():
        for _ in range(3):
            fn()
        med, best, busy = measure(fn, group)
        lines.append(f"rank {w.rank} {nbytes >> 20}M {name}: host {med:.1f} us "
                     f"(best batch {best:.1f}), busy {busy:.1f} us")
    for name, fn in fns.items():
        if "land" not in name:
            continue
        torch.cuda.synchronize()
        dist.barrier(group=group)
        torch.cuda._sleep(int(30 * 1000 * CYC))
        prof = cProfile.Profile()
        prof.enable()
        for _ in range(CALLS):
            fn()
        prof.disable()
        torch.cuda.synchronize()
        if w.rank == 0:
            s = io.StringIO()
            pstats.Stats(prof, stream=s).sort_stats("tottime").print_stats(18)
            lines.append(f"== profile {name}\n" + s.getvalue())
    return lines


if __name__ == "__main__":
    for lines in ditron.launch(body, 2, int(sys.argv[1]) << 20, int(sys.argv[2]),
                               backend="cuda"):
        print("\n".join(lines))
