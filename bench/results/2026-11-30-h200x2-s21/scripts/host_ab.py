"""Host us per call of eager all-gather / reduce-scatter (copy engine and SM engine) with a
GPU head start (median of 5 batches of 20 calls), and busy us per call (events between 20
back-to-back calls, median), before any NCCL collective and again after 40 NCCL
all-gathers (NCCL's threads running), per rank."""

from __future__ import annotations

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


def body(sizes, label):
    from ditron.runtime.world import current

    w = ditron.world()
    group = current().host_group
    lines = []
    fns = {}
    for nbytes in sizes:
        xa = torch.randn(nbytes // 2 // w.world_size, device=w.device).bfloat16()
        xr = torch.randn(nbytes // 2, device=w.device).bfloat16()
        for eng in ("copy_engine", "sm"):
            fns[f"{nbytes >> 20}M ag {eng}"] = (
                lambda x=xa, e=eng: ditron.ops.all_gather(x, engine=e))
            fns[f"{nbytes >> 20}M rs {eng}"] = (
                lambda x=xr, e=eng: ditron.ops.reduce_scatter(x, engine=e))
    for phase in ("before NCCL", "after NCCL"):
        if phase == "after NCCL":
            y = torch.empty(1 << 20, device=w.device)
            out = torch.empty(w.world_size << 20, device=w.device)
            for _ in range(40):
                dist.all_gather_into_tensor(out, y)
            torch.cuda.synchronize()
        for name, fn in fns.items():
            for _ in range(3):
                fn()
            med, best, busy = measure(fn, group)
            lines.append(f"{label} rank {w.rank} {phase}: {name}: host {med:.1f} us "
                         f"(best batch {best:.1f}), busy {busy:.1f} us")
    return lines


if __name__ == "__main__":
    sizes = [int(s) << 20 for s in sys.argv[1].split(",")]
    for lines in ditron.launch(body, 2, sizes, sys.argv[2], backend="cuda"):
        print("\n".join(lines))
