"""Host time of the copy engine's eager all-gather / reduce-scatter: per call with a GPU
head start (the GPU sleeps while the host queues, so the host's own cost shows), the same
calls back to back timed by events (as `ditron bench collectives --busy`), and rank 0's
cProfile of the head-started batch (top functions by own time)."""

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
CYCLES_PER_US = 1980


def body(sizes: list[int]) -> list[str]:
    from ditron.runtime.world import current

    w = ditron.world()
    group = current().host_group
    lines = []
    for nbytes in sizes:
        xa = torch.randn(nbytes // 2 // w.world_size, device=w.device).bfloat16()
        xr = torch.randn(nbytes // 2, device=w.device).bfloat16()
        calls = (("all_gather", lambda x=xa: ditron.ops.all_gather(x, engine="copy_engine")),
                 ("reduce_scatter",
                  lambda x=xr: ditron.ops.reduce_scatter(x, engine="copy_engine")))
        for op, fn in calls:
            for _ in range(3):
                fn()
            torch.cuda.synchronize()
            dist.barrier(group=group)
            torch.cuda._sleep(int(40000 * CYCLES_PER_US))
            t0 = time.perf_counter()
            for _ in range(CALLS):
                fn()
            host = (time.perf_counter() - t0) * 1e6 / CALLS
            torch.cuda.synchronize()
            dist.barrier(group=group)
            events = [torch.cuda.Event(enable_timing=True) for _ in range(CALLS + 1)]
            events[0].record()
            for i in range(CALLS):
                fn()
                events[i + 1].record()
            events[-1].synchronize()
            busy = statistics.median(a.elapsed_time(b) * 1e3
                                     for a, b in zip(events, events[1:], strict=False))
            dist.barrier(group=group)
            torch.cuda._sleep(int(40000 * CYCLES_PER_US))
            prof = cProfile.Profile()
            prof.enable()
            for _ in range(CALLS):
                fn()
            prof.disable()
            torch.cuda.synchronize()
            dist.barrier(group=group)
            lines.append(f"== rank {w.rank} {op} {nbytes >> 20} MB: host {host:.1f} us per call "
                         f"(GPU head start), busy {busy:.1f} us per call")
            if w.rank == 0:
                s = io.StringIO()
                pstats.Stats(prof, stream=s).sort_stats("tottime").print_stats(18)
                lines += ["   " + ln for ln in s.getvalue().splitlines()[6:] if ln.strip()]
    return lines


if __name__ == "__main__":
    sizes = [int(float(s) * (1 << 20)) for s in sys.argv[1].split(",")]
    for lines in ditron.launch(body, 2, sizes, backend="cuda"):
        print("\n".join(lines))
