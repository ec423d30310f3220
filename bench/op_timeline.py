"""GPU timeline of a batch of TP-GEMM calls: what each stream runs, and where the GPU idles.

Every rank runs ``--batch`` calls of each selected implementation back to back (after a
warm-up, a call inside the profiler and a host barrier, as ``ditron bench tp-gemm`` times
them) under ``torch.profiler`` (CUDA activity); rank 0 prints, per implementation:

* the batch's time per call by CUDA events (profiled, so host costs are inflated);
* per stream: busy time (union of its kernels / copies) and the activities of the first call;
* the mean duration of each kind of activity;
* the idle gaps of the compute stream over 3 us (offset, length, what came before and after).

``--head-start-us`` makes the GPU sleep before the batch while the host queues it, so that
host costs leave the timeline and what remains is the GPU side (waits for peers included).
``--graph``: the batch is one CUDA graph of ``--batch`` calls (captured after a warm-up
inside ``ditron.ops.graph_safe()``, as ``ditron bench tp-gemm --graphs`` does), replayed
under the profiler: the graph-safe variants, with no host time between their steps.

    python bench/op_timeline.py [--world-size 2] [--shape 8192,4096,11008] [--impls ...]
        [--graph]

``--impls``: names of ``bench/host_profile.py``'s ``_tp_impls`` (e.g. ``gemm_rs/copy_engine``).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile

import torch

import ditron

DEFAULT_IMPLS = "ag_gemm/overlap,ag_gemm/baseline,gemm_rs/copy_engine,gemm_rs/colocated"
#: the host range around the timed batch (the profiler starts at different moments on the
#: ranks, so one call inside it, then a barrier, come first and are left out)
MARKER = "ditron_timed_batch"
#: ``torch.cuda._sleep`` spins this many cycles per microsecond (about the H200's clock)
CYCLES_PER_US = 1980


def _intervals(trace: dict, marker: str = MARKER) -> list[dict]:
    """The GPU activities (kernels, copies, memsets) that start after the host range
    ``marker`` began (all of them when there is no such range)."""
    keep = ("kernel", "gpu_memcpy", "gpu_memset")
    starts = [float(e["ts"]) for e in trace["traceEvents"]
              if e.get("name") == marker and e.get("cat") == "user_annotation"]
    cutoff = min(starts) if starts else float("-inf")
    return sorted(({"name": e["name"], "stream": e["args"].get("stream", -1),
                    "ts": float(e["ts"]), "dur": float(e.get("dur", 0))}
                   for e in trace["traceEvents"]
                   if e.get("cat") in keep and float(e["ts"]) >= cutoff
                   and "spin_kernel" not in e["name"]),  # the head start's sleep
                  key=lambda e: e["ts"])


def _union(evs: list[dict]) -> float:
    busy, end = 0.0, float("-inf")
    for e in evs:
        lo, hi = e["ts"], e["ts"] + e["dur"]
        if hi <= end:
            continue
        busy += hi - max(lo, end)
        end = hi
    return busy


def _short(name: str) -> str:
    return name if len(name) <= 48 else name[:45] + "..."


def _report(label: str, per_call: float, evs: list[dict], calls: int) -> None:
    if not evs:
        print(f"== {label}: no GPU activity recorded", flush=True)
        return
    t0 = evs[0]["ts"]
    span = evs[-1]["ts"] + evs[-1]["dur"] - t0
    streams: dict[int, list[dict]] = {}
    for e in evs:
        streams.setdefault(e["stream"], []).append(e)
    main = max(streams, key=lambda s: sum(e["dur"] for e in streams[s]))
    print(f"== {label}: {per_call:.1f} us per call (events, profiled), GPU span "
          f"{span / calls:.1f} us per call, {len(evs)} activities", flush=True)
    for s, lst in sorted(streams.items()):
        tag = "compute" if s == main else "side"
        print(f"   stream {s} ({tag}): busy {_union(lst) / calls:.1f} us per call, "
              f"{len(lst)} activities", flush=True)
    by_name: dict[str, list[float]] = {}
    for e in evs:
        by_name.setdefault(_short(e["name"]), []).append(e["dur"])
    print("   mean duration by activity:", flush=True)
    for name, durs in sorted(by_name.items(), key=lambda kv: -sum(kv[1])):
        print(f"     {sum(durs) / len(durs):8.1f} us x {len(durs):3}  {name}", flush=True)
    first_call = [e for e in evs if e["ts"] - t0 < span / calls]
    print("   first call:", flush=True)
    for e in first_call[:24]:
        print(f"     s{e['stream']:<4} +{e['ts'] - t0:8.1f} {e['dur']:8.1f} us  "
              f"{_short(e['name'])}", flush=True)
    lst = streams[main]
    gaps = []
    for prev, nxt in zip(lst, lst[1:], strict=False):
        gap = nxt["ts"] - (prev["ts"] + prev["dur"])
        if gap > 3.0:
            gaps.append((prev["ts"] + prev["dur"] - t0, gap, prev["name"], nxt["name"]))
    print(f"   compute-stream gaps > 3 us: {len(gaps)}, total {sum(g[1] for g in gaps):.1f} "
          f"us over the batch", flush=True)
    for at, gap, prev, nxt in gaps[:12]:
        print(f"     +{at:8.1f} {gap:7.1f} us  after {_short(prev)}  before {_short(nxt)}",
              flush=True)


def _run(shape: tuple[int, int, int], impls: list[str], batch: int,
         head_start_us: float, graph: bool = False) -> None:
    import torch.distributed as dist
    from host_profile import _tp_impls  # bench/ is the script's folder
    from torch.profiler import ProfilerActivity, profile, record_function

    from ditron.ops.graphs import capture
    from ditron.runtime.world import current

    rank = ditron.world().rank
    group = current().host_group
    table = dict(_tp_impls(*shape))
    unknown = [name for name in impls if name not in table]
    if unknown:
        raise SystemExit(f"unknown --impls {unknown}; known: {sorted(table)}")
    for label in impls:
        fn = table[label]
        if graph:  # the ops' graph-safe variants; the bare GEMM and NCCL as they are
            g = capture(fn, batch, safe_warm_up=not label.endswith(("/baseline", "/gemm")))
            run_batch = g.replay
        else:
            def run_batch(fn=fn):
                for _ in range(batch):
                    fn()
        for _ in range(3 if not graph else 1):
            run_batch()
        torch.cuda.synchronize()
        dist.barrier(group=group)
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            run_batch()
            torch.cuda.synchronize()
            dist.barrier(group=group)
            with record_function(MARKER):
                if head_start_us > 0:  # the GPU idles while the host queues the batch
                    torch.cuda._sleep(int(head_start_us * CYCLES_PER_US))
                start.record()
                run_batch()
                end.record()
            torch.cuda.synchronize()
        dist.barrier(group=group)
        if rank != 0:
            continue
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "trace.json")
            prof.export_chrome_trace(path)
            with open(path) as f:
                evs = _intervals(json.load(f))
        _report(label + (" (graph)" if graph else ""), start.elapsed_time(end) * 1e3 / batch,
                evs, batch)


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--world-size", type=int, default=None)
    p.add_argument("--shape", default="8192,4096,11008", help="global M,N,K")
    p.add_argument("--impls", default=DEFAULT_IMPLS)
    p.add_argument("--batch", type=int, default=5)
    p.add_argument("--head-start-us", type=float, default=0.0,
                   help="let the GPU sleep this long before the batch, so that the host has "
                        "queued it all and the timeline shows the GPU side alone")
    p.add_argument("--graph", action="store_true",
                   help="replay the batch as one CUDA graph (the graph-safe variants)")
    args = p.parse_args()
    if not torch.cuda.is_available():
        raise SystemExit("op_timeline needs CUDA (the CUDA activity of torch.profiler)")
    w = args.world_size or max(2, torch.cuda.device_count())
    shape = tuple(int(v) for v in args.shape.split(","))
    ditron.launch(_run, w, shape, args.impls.split(","), args.batch, args.head_start_us,
                  args.graph, backend="cuda")
    return 0


if __name__ == "__main__":
    sys.exit(main())
