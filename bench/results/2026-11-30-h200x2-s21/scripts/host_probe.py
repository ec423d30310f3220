"""Host cost of eager calls on 2 GPUs: driver primitives (us per call, GPU held by a sleep so
nothing waits), then per op / engine / size: host us per call with a GPU head start, busy us
per call (events between back-to-back calls), and rank 0's cProfile of the head-started batch
as us of own time per op call."""

from __future__ import annotations

import cProfile
import pstats
import statistics
import sys
import time

import torch
import torch.distributed as dist

import ditron

CALLS = 20
CYC = 1980  # cycles per us


def hold(ms: float) -> None:
    torch.cuda._sleep(int(ms * 1000 * CYC))


def prim(lines, name, fn, n=200):
    torch.cuda.synchronize()
    hold(30)
    t0 = time.perf_counter()
    for _ in range(n):
        fn()
    dt = (time.perf_counter() - t0) * 1e6 / n
    torch.cuda.synchronize()
    lines.append(f"prim {name}: {dt:.2f} us")


def body(sizes):
    from ditron.ops.raw_pushes import current_stream
    from ditron.runtime import stream_memops as sm
    from ditron.runtime.signals import signal_pad
    from ditron.runtime.world import current

    rt = current()
    w = ditron.world()
    group = rt.host_group
    lines = []
    me, peer = w.rank, 1 - w.rank
    pad = signal_pad("probe", 4)
    buf = rt.heap.alloc((64 << 20,), torch.uint8, name="probe")
    dist.barrier(group=group)
    stream = current_stream(w.device.index)
    bases = rt.heap.mapping.bases
    off = rt.heap.offset_of(buf)
    loc, rem = bases[me] + off, bases[peer] + off
    side = torch.cuda.Stream()
    ev = sm.new_event()
    prim(lines, "write_value local", lambda: sm.write_value(stream, pad.address(me), 1))
    prim(lines, "write_value peer", lambda: sm.write_value(stream, pad.address(peer) + 8, 1))
    prim(lines, "wait_value local (met)", lambda: sm.wait_value(stream, pad.address(me), 0))
    prim(lines, "memcpy local 4KB", lambda: sm.memcpy(stream, loc + 4096, loc, 4096))
    prim(lines, "memcpy peer 4KB", lambda: sm.memcpy(stream, rem, loc, 4096))
    prim(lines, "memcpy peer 32MB", lambda: sm.memcpy(stream, rem, loc, 32 << 20), 50)
    prim(lines, "memcpy local 32MB", lambda: sm.memcpy(stream, loc + (32 << 20), loc, 32 << 20), 50)
    prim(lines, "record+wait event", lambda: (sm.record_event(ev, stream),
                                             sm.wait_event(side.cuda_stream, ev)))
    prim(lines, "torch.empty 32MB", lambda: torch.empty(16 << 20, dtype=torch.bfloat16,
                                                        device=w.device))
    prim(lines, "current_stream raw", lambda: current_stream(w.device.index))
    prim(lines, "pad.address", lambda: pad.address(peer))
    x = torch.randn(1 << 20, device=w.device)
    y = torch.empty_like(x)
    prim(lines, "torch copy_ 4MB", lambda: y.copy_(x))
    prim(lines, "torch add 4MB", lambda: torch.add(x, x, out=y))
    dist.barrier(group=group)
    for nbytes in sizes:
        xa = torch.randn(nbytes // 2 // w.world_size, device=w.device).bfloat16()
        xr = torch.randn(nbytes // 2, device=w.device).bfloat16()
        calls = []
        for eng in ("sm", "copy_engine"):
            calls.append((f"all_gather/{eng}",
                          lambda x=xa, e=eng: ditron.ops.all_gather(x, engine=e)))
            calls.append((f"reduce_scatter/{eng}",
                          lambda x=xr, e=eng: ditron.ops.reduce_scatter(x, engine=e)))
        for op, fn in calls:
            for _ in range(3):
                fn()
            torch.cuda.synchronize()
            dist.barrier(group=group)
            hold(40)
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
            hold(40)
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
                st = pstats.Stats(prof).stats
                rows = sorted(st.items(), key=lambda kv: -kv[1][2])[:22]
                total = sum(v[2] for v in st.values()) * 1e6 / CALLS
                lines.append(f"   profiled own time total {total:.1f} us per call")
                for (fname, lno, func), (_cc, nc, tt, ct, _) in rows:
                    short = fname.split("/ditron/")[-1] if "/ditron/" in fname else fname[-30:]
                    lines.append(f"   {tt * 1e6 / CALLS:7.1f} own {ct * 1e6 / CALLS:7.1f} cum "
                                 f"{nc / CALLS:5.1f}x  {short}:{lno}({func})")
    return lines


if __name__ == "__main__":
    sizes = [int(float(s) * (1 << 20)) for s in sys.argv[1].split(",")]
    for lines in ditron.launch(body, 2, sizes, backend="cuda"):
        print("\n".join(lines))
