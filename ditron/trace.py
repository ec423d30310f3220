"""Opt-in overlap trace: when each GEMM tile starts, when its chunks are in, when it ends;
and for a megakernel (``ditron.task``) when each item waits and runs, per program.

Turn it on with ``DITRON_TRACE=1`` or :func:`enable`. The ops then give the persistent GEMM a
trace buffer; per tile it records (tile id, start, chunks ready = after its waits, main loop
done, end): the span from the main loop to the end is the tile's epilogue (its stores, and
for reduce-scatter / all-reduce tiles the pushes to peers or the waits for their partials).

Clocks, honestly: on GPU the device's ``%globaltimer`` (ns; inline PTX, CUDA backend only).
On the CPU backend there is no device timer (no inline asm in the interpreter), so the
kernel records a *logical* clock, the index of each event in the rank's event sequence, and
the host spreads those indices uniformly between its own clock readings before and after
the launch. CPU traces therefore show true order and the host-measured launch span, not
true durations of individual tiles. "chunks ready" is the moment the tile's waits returned
(the arrival of its last chunk as seen by that tile, or the tile's start when it had none).

``ditron trace --op ag_gemm --world-size 2`` runs an op on local ranks and writes
``<out>.json`` (Chrome / Perfetto: chrome://tracing, ui.perfetto.dev) and ``<out>.png``
(when matplotlib is installed); where the op ran no tiled kernel it writes nothing and
exits with 1, naming the engines that leave no tiles.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

import torch

from .runtime.arguments import output_file, positive_int
from .runtime.config import env_flag

_ENABLED: bool | None = None
_EVENTS: list[dict] = []
#: calls recorded so far by (call event name, rank): the next call's ``args["call"]``
_CALLS: dict[tuple[str, int], int] = {}


def enabled() -> bool:
    if _ENABLED is not None:
        return _ENABLED
    return env_flag("DITRON_TRACE")


def enable(on: bool = True) -> None:
    global _ENABLED
    _ENABLED = on


def host_clock() -> int:
    return time.perf_counter_ns()


def _next_call(op: str, rank: int) -> int:
    """The index of ``op``'s call now recorded on ``rank`` (0 after :func:`clear`); counted,
    not found by scanning the events, which made a long traced run quadratic."""
    key = (f"{op} call", rank)
    call = _CALLS.get(key, 0)
    _CALLS[key] = call + 1
    return call


def record(op: str, buf: torch.Tensor, n_blocks: int, t0: int, t1: int) -> None:
    """Turn one launch's trace buffer into events (microseconds, host time base)."""
    from .runtime.world import current

    rt = current()
    rank = rt.world.rank
    from .kernels.gemm import TRACE_FIELDS

    rows = buf[1:].view(-1, TRACE_FIELDS).tolist()
    gpu = rt.world.device.type == "cuda"
    if gpu:
        base = min((r[1] for r in rows), default=0)  # a launch of no tiles records none
        def conv(v):
            return (t0 + (v - base)) / 1e3
    else:
        n = max(int(buf[0]), 1)
        def conv(v):
            return (t0 + (t1 - t0) * (v + 0.5) / n) / 1e3
    args = {"call": _next_call(op, rank), "tiles": len(rows),
            "tiles_waited": sum(1 for r in rows if r[2] > r[1])}
    if gpu and rows:  # device-clock figures (the CPU clock is logical, see above)
        args.update(
            device_span_us=(max(r[4] for r in rows) - base) / 1e3,
            wait_us_total=sum(r[2] - r[1] for r in rows) / 1e3,
            tile_us_mean=sum(r[3] - r[2] for r in rows) / len(rows) / 1e3,
            epilogue_us_mean=sum(r[4] - r[3] for r in rows) / len(rows) / 1e3)
    _EVENTS.append({"name": f"{op} call", "ph": "X", "pid": rank, "tid": 0,
                    "ts": t0 / 1e3, "dur": (t1 - t0) / 1e3, "args": args})
    for tile, start, ready, main_end, end in rows:
        mb, nb = divmod(tile, n_blocks)
        if ready > start:
            _EVENTS.append({"name": "wait", "ph": "X", "pid": rank, "tid": 1,
                            "ts": conv(start), "dur": max(conv(ready) - conv(start), 0.001),
                            "args": {"tile": tile}})
            _EVENTS.append({"name": f"chunks of row block {mb} in", "ph": "i", "s": "t",
                            "pid": rank, "tid": 1, "ts": conv(ready)})
        _EVENTS.append({"name": f"tile {mb},{nb}", "ph": "X", "pid": rank, "tid": 2,
                        "ts": conv(ready), "dur": max(conv(main_end) - conv(ready), 0.001),
                        "args": {"tile": tile, "row_block": mb, "col_block": nb}})
        _EVENTS.append({"name": f"epilogue {mb},{nb}", "ph": "X", "pid": rank, "tid": 3,
                        "ts": conv(main_end), "dur": max(conv(end) - conv(main_end), 0.001),
                        "args": {"tile": tile}})


#: trace threads of a megakernel's programs: program p is thread PROGRAM_TID + p
PROGRAM_TID = 10


def record_items(op: str, rows: list[list[int]], labels: list[tuple[str, int]], clock: int,
                 t0: int, t1: int) -> dict:
    """Turn one megakernel call's item rows into events (``ditron.task``); return the call's
    per-task summary (also the call event's ``args["tasks"]``).

    ``rows``: one ``[item, program, start, waits done, tile done, end]`` per queue position
    (device clock, or logical clock on the CPU backend with ``clock`` events in all);
    ``labels[item]``: ``(task name, tile)``; ``t0``/``t1``: host clock around the launch.
    Each program is a thread of the rank: its items' waits (``wait``) and tiles (``task
    tile``, up to the end of its notifies) in the order it ran them."""
    from .runtime.world import current

    rt = current()
    rank = rt.world.rank
    gpu = rt.world.device.type == "cuda"
    base = min((r[2] for r in rows), default=0)

    def conv(v: int) -> float:  # us, host time base
        if gpu:
            return (t0 + (v - base)) / 1e3
        return (t0 + (t1 - t0) * (v + 0.5) / max(clock, 1)) / 1e3

    tasks: dict[str, dict] = {}
    for item, program, start, ready, tile_done, end in rows:
        name, tile = labels[item]
        s = tasks.setdefault(name, {"tiles": 0, "first_start_us": float("inf"),
                                    "last_end_us": 0.0, "wait_us_total": 0.0,
                                    "tile_us_total": 0.0})
        s["tiles"] += 1
        s["first_start_us"] = min(s["first_start_us"], conv(start) - t0 / 1e3)
        s["last_end_us"] = max(s["last_end_us"], conv(end) - t0 / 1e3)
        s["wait_us_total"] += conv(ready) - conv(start)
        s["tile_us_total"] += conv(tile_done) - conv(ready)
        tid = PROGRAM_TID + program
        if ready > start:
            _EVENTS.append({"name": "wait", "ph": "X", "pid": rank, "tid": tid,
                            "ts": conv(start), "dur": max(conv(ready) - conv(start), 0.001),
                            "args": {"task": name, "tile": tile}})
        _EVENTS.append({"name": f"{name} {tile}", "ph": "X", "pid": rank, "tid": tid,
                        "ts": conv(ready), "dur": max(conv(end) - conv(ready), 0.001),
                        "args": {"task": name, "tile": tile, "item": item,
                                 "notify_us": conv(end) - conv(tile_done)}})
    for s in tasks.values():
        s["tile_us_mean"] = s.pop("tile_us_total") / s["tiles"]
    _EVENTS.append({"name": f"{op} call", "ph": "X", "pid": rank, "tid": 0, "ts": t0 / 1e3,
                    "dur": (t1 - t0) / 1e3,
                    "args": {"call": _next_call(op, rank), "items": len(rows),
                             "clock": "device" if gpu else "logical (order only)",
                             "tasks": tasks}})
    return tasks


def events() -> list[dict]:
    return list(_EVENTS)


def clear() -> None:
    """Drop the recorded events; the next call of each op is call 0 again."""
    _EVENTS.clear()
    _CALLS.clear()


def kind(task: str) -> str:
    """What a megakernel item's task is drawn as: its name after the last ``.``
    (``layer3.up`` is an ``up``), so that the layers of a stack share colours."""
    return task.rsplit(".", 1)[-1]


def program_occupancy(all_events: list[dict], rank: int
                      ) -> tuple[list[float], dict[str, list[int]]]:
    """How many of ``rank``'s megakernel programs were in each state over time: ``(times,
    counts)``, ``counts[state][i]`` the programs in ``state`` from ``times[i]`` to
    ``times[i + 1]`` (us); a state is ``"wait"`` or a task :func:`kind`. Each item's waits
    and tile (up to the end of its notifies) are one event each (:func:`record_items`)."""
    steps: dict[float, dict[str, int]] = {}
    states: list[str] = []
    for e in all_events:
        if e["pid"] != rank or e["ph"] != "X" or e.get("tid", 0) < PROGRAM_TID:
            continue
        state = "wait" if e["name"] == "wait" else kind(e["args"]["task"])
        if state not in states:
            states.append(state)
        for t, delta in ((e["ts"], 1), (e["ts"] + e["dur"], -1)):
            at = steps.setdefault(t, {})
            at[state] = at.get(state, 0) + delta
    times = sorted(steps)
    counts: dict[str, list[int]] = {s: [] for s in sorted(states, key=lambda s: s == "wait")}
    now = dict.fromkeys(counts, 0)
    for t in times:
        for state, delta in steps[t].items():
            now[state] += delta
        for state in counts:
            counts[state].append(now[state])
    return times, counts


#: a track's spans that overlap go to more tracks (lanes): lane k of thread t is thread
#: ``t + k * LANE_TID`` (:func:`write`)
LANE_TID = 1_000_000


def _lanes(all_events: list[dict]) -> list[dict]:
    """``all_events`` as the JSON holds them: in time order, and the complete (``"X"``)
    spans of one thread that overlap without nesting (the tiles of GPU programs that run at
    once, all on the tiles' thread) spread over lanes, each a thread of its own: viewers
    (chrome://tracing, Perfetto) take a thread's spans as a stack and misdraw or drop
    those that overlap only in part. Instant events stay on their thread."""
    ordered = sorted(all_events, key=lambda e: e.get("ts", 0.0))
    ends: dict[tuple, list[float]] = {}  # (pid, tid) -> each lane's last end
    out = []
    for e in ordered:
        if e.get("ph") != "X":
            out.append(e)
            continue
        lanes = ends.setdefault((e["pid"], e.get("tid", 0)), [])
        # a span may start where the last ended, give or take float rounding (< 1e-5 us)
        lane = next((k for k, end in enumerate(lanes) if end <= e["ts"] + 1e-4), len(lanes))
        if lane == len(lanes):
            lanes.append(0.0)
        lanes[lane] = e["ts"] + e["dur"]
        out.append(e if lane == 0 else {**e, "tid": e.get("tid", 0) + lane * LANE_TID})
    return out


def write(all_events: list[dict], prefix: str, title: str = "") -> list[str]:
    """Write ``prefix.json`` (Chrome trace) and ``prefix.png`` (if matplotlib and there are
    spans to draw); return paths.

    The JSON has a process per rank and its events in time order; spans of one thread that
    overlap (GPU programs running tiles at once) are spread over lanes (:func:`_lanes`).
    The PNG (headed ``title``) draws an op's tiles and waits as bars, one row per rank, and a
    megakernel's programs as how many of them run each task or wait, over time, one panel
    per rank."""
    os.makedirs(os.path.dirname(os.path.abspath(prefix)), exist_ok=True)
    laid = _lanes(all_events)
    meta = []
    names = {0: "op", 1: "waits / chunk arrivals", 2: "tiles (main loop)", 3: "epilogues"}
    for pid in sorted({e["pid"] for e in laid}):
        meta.append({"name": "process_name", "ph": "M", "pid": pid,
                     "args": {"name": f"rank {pid}"}})
        for tid in sorted({e.get("tid", 0) for e in laid if e["pid"] == pid} | {0}):
            lane, base = divmod(tid, LANE_TID)
            name = names.get(base, f"program {base - PROGRAM_TID}")
            meta.append({"name": "thread_name", "ph": "M", "pid": pid, "tid": tid,
                         "args": {"name": name + (f" ({lane + 1})" if lane else "")}})
    paths = [prefix + ".json"]
    with open(paths[0], "w") as f:
        json.dump({"traceEvents": meta + laid, "displayTimeUnit": "ns"}, f)
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return paths
    t_min = min((e["ts"] for e in all_events if "ts" in e), default=0.0)
    op_ranks = sorted({e["pid"] for e in all_events
                       if e["ph"] == "X" and 0 < e.get("tid", 0) < PROGRAM_TID})
    mk_ranks = sorted({e["pid"] for e in all_events
                       if e["ph"] == "X" and e.get("tid", 0) >= PROGRAM_TID})
    heights = ([1 + 0.8 * len(op_ranks)] if op_ranks else []) + [2.5] * len(mk_ranks)
    if not heights:  # no tile or task spans recorded: nothing to draw
        return paths
    fig, axes = plt.subplots(len(heights), 1, figsize=(10, sum(heights) or 1),
                             height_ratios=heights or None, squeeze=False)
    axes = list(axes[:, 0])
    if op_ranks:
        _draw_op_tiles(axes.pop(0), all_events, op_ranks, t_min)
    for ax, r in zip(axes, mk_ranks, strict=True):
        _draw_programs(ax, all_events, r, t_min)
    if title:
        fig.suptitle(title, fontsize="medium")
    fig.tight_layout()
    fig.savefig(prefix + ".png")
    plt.close(fig)
    return paths + [prefix + ".png"]


def _draw_op_tiles(ax, all_events: list[dict], ranks: list[int], t_min: float) -> None:
    for i, r in enumerate(ranks):
        for e in all_events:
            if e["pid"] != r or e["ph"] != "X" or not 0 < e.get("tid", 0) < PROGRAM_TID:
                continue
            color = ("tab:red" if e["name"] == "wait" else
                     "tab:orange" if e["tid"] == 3 else "tab:blue")
            ax.barh(i, e["dur"], left=e["ts"] - t_min, color=color, height=0.6)
    ax.set_yticks(range(len(ranks)), [f"rank {r}" for r in ranks])
    ax.set_xlabel("us (blue: tiles' main loops, orange: epilogues, red: waiting for chunks)")


#: colours of a megakernel's task kinds, in the order they first ran (red is for waits)
_TASK_COLORS = ["tab:blue", "tab:green", "tab:orange", "tab:purple", "tab:brown", "tab:pink",
                "tab:olive", "tab:cyan", "tab:gray"]


def _draw_programs(ax, all_events: list[dict], rank: int, t_min: float) -> None:
    times, counts = program_occupancy(all_events, rank)
    xs = [t - t_min for t in times]
    below = [0] * len(xs)
    palette = iter(_TASK_COLORS * (1 + len(counts) // len(_TASK_COLORS)))
    for state, n in counts.items():
        above = [b + c for b, c in zip(below, n, strict=True)]
        ax.fill_between(xs, below, above, step="post", label=state, linewidth=0,
                        color="tab:red" if state == "wait" else next(palette))
        below = above
    ax.set_ylabel(f"rank {rank}\nprograms")
    ax.set_xlabel("us (megakernel programs by the task they run, or waiting)")
    ax.legend(loc="upper right", fontsize="small", ncol=len(counts))




def _run_traced(op: str, M: int, N: int, K: int, calls: int,
                dtype: torch.dtype = torch.float32) -> list[dict]:
    import ditron

    w = ditron.world()
    enable(True)
    torch.manual_seed(w.rank)
    fn = getattr(ditron.ops, op)
    rows = M // w.world_size if op == "ag_gemm" else M
    a = torch.randn(rows, K, device=w.device).to(dtype)
    b = torch.randn(K, N, device=w.device).to(dtype)
    fn(a, b, method="overlap")  # warm-up, not recorded: compiles and loads the traced kernel
    _sync_ranks()
    clear()
    for _ in range(calls):
        # every traced call synchronises its rank; a barrier first lines the ranks up, so a
        # call's span does not include the other rank's host work since the last one
        _sync_ranks()
        fn(a, b, method="overlap")
    return events()


def _sync_ranks() -> None:
    """Wait for this rank's device, then for every rank (the host group)."""
    import torch.distributed as dist

    from .runtime.world import current

    rt = current()
    rt.backend.synchronize(rt.world.device)
    if rt.world.world_size > 1:
        dist.barrier(group=rt.host_group)


def output_prefix(text: str) -> str:
    """``--out``: a path without suffix, to which ``.json`` and ``.png`` are added (a
    ``.json`` or ``.png`` given is dropped: ``t.json`` wrote ``t.json.json``); refused (a
    usage error, before any rank starts) where it names no file (empty, or ending in a
    separator) or where one of the two files would be a folder."""
    prefix = text.removesuffix(".json") if text.endswith(".json") else text.removesuffix(".png")
    if os.path.basename(prefix) in ("", ".", ".."):
        raise argparse.ArgumentTypeError(
            f"{text!r} names no file; give a path without suffix, e.g. 'traces/ag'")
    for suffix in (".json", ".png"):
        if os.path.isdir(prefix + suffix):
            raise argparse.ArgumentTypeError(f"{prefix + suffix!r} is a folder; give another "
                                             f"path without suffix")
    return output_file(prefix)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="ditron trace", description="Overlap trace of an overlapped GEMM on local ranks: "
        "when each tile starts, when its chunks are in, when it ends. Writes OUT.json (Chrome "
        "/ Perfetto) and OUT.png (with matplotlib).")
    p.add_argument("--op", default="ag_gemm", choices=["ag_gemm", "gemm_rs", "gemm_ar"],
                   help="operator to trace (default %(default)s)")
    p.add_argument("--world-size", type=positive_int, default=2,
                   help="ranks, at least 2 (default %(default)s)")
    p.add_argument("--m", type=positive_int, default=64,
                   help="global rows (default %(default)s)")
    p.add_argument("--n", type=positive_int, default=64,
                   help="columns of the weight (default %(default)s)")
    p.add_argument("--k", type=positive_int, default=32,
                   help="reduction dimension; for gemm_rs and gemm_ar each rank's share of "
                        "it (default %(default)s)")
    p.add_argument("--calls", type=positive_int, default=2,
                   help="calls traced, after one untraced warm-up call (default %(default)s)")
    p.add_argument("--out", type=output_prefix, default="ditron-trace",
                   help="output path without suffix (a .json or .png given is dropped): writes "
                        "OUT.json and OUT.png (default %(default)s)")
    p.add_argument("--backend", choices=["cpu", "cuda"], default=None,
                   help="default: DITRON_BACKEND, else cuda when a GPU is visible, else cpu")
    p.add_argument("--dtype", choices=["bf16", "fp16", "fp32"], default="bf16",
                   help="default %(default)s")
    args = p.parse_args(argv)
    if args.world_size == 1:
        p.error("--world-size 1: one rank runs a plain GEMM, nothing overlaps to trace; "
                "use 2 or more")
    if args.op != "gemm_ar" and args.m % args.world_size:
        p.error(f"--m {args.m} (global rows) does not split over --world-size "
                f"{args.world_size} ranks for {args.op}")
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}[args.dtype]
    import ditron
    from ditron.runtime.config import default_backend

    per_rank = ditron.launch(_run_traced, args.world_size, args.op, args.m, args.n, args.k,
                             args.calls, dtype, backend=args.backend)
    if not any(per_rank):  # an empty trace (and no PNG) used to be written, exit code 0
        print(f"ditron trace: no tile was recorded: {args.op} ran no tiled GEMM kernel (an "
              f"engine that computes with torch.matmul per chunk: GEMM-RS 'copy_engine' / "
              f"'copy_engine_pull', AG-GEMM 'copy_engine_matmul'; or the fallback across "
              f"nodes); pick a tiled engine, e.g. DITRON_RS_ENGINE=colocated or "
              f"DITRON_AG_ENGINE=copy_engine (docs/tp_gemm.md)", file=sys.stderr)
        return 1
    for evs in per_rank:
        for e in evs:
            if e.get("tid") == 0 and e["name"].endswith(" call"):
                figures = ", ".join(f"{k} {v:.1f}" if isinstance(v, float) else f"{k} {v}"
                                    for k, v in e["args"].items())
                print(f"rank {e['pid']} {e['name']}: {figures}")
    title = (f"{args.op}, M x N x K = {args.m} x {args.n} x {args.k}, {args.dtype}, "
             f"{args.world_size} ranks ({args.backend or default_backend()} backend)")
    paths = write([e for evs in per_rank for e in evs], args.out, title)
    print("wrote " + ", ".join(paths), file=sys.stderr)
    return 0
