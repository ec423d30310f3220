"""``ditron bench collectives``: every collective and engine against torch.distributed.

Sizes are the full tensor of each op (all-gather output, reduce-scatter / all-reduce /
all-to-all input), as nccl-tests counts them; ``algbw = size / time`` and ``busbw`` scales it by
``(W-1)/W`` (``2(W-1)/W`` for all-reduce). Every rank runs the same fixed number of warm-up
and timed iterations (never ``do_bench``: its adaptive loop deadlocks collectives), timed by
CUDA events on GPU (wall clock on CPU), medians over iterations (the slowest rank's median is
reported, as the other benchmarks do), with the ranks aligned by a host barrier before each
measurement: an *isolated* call, whose time includes its host cost.
The implementations of one op and size take turns in rounds whose order rotates (each runs
at each position of a round once), eagerly and under graphs, so a drift of the GPU's speed
within a round does not favour the ones timed first. ``--busy`` adds rows ``"<impl> busy"``:
the same calls issued back to back after a barrier (an implementation's calls of a round, in
the same rotating rounds), each timed by events between consecutive calls (median), as
nccl-tests and a training step run them: host cost shows only where it exceeds the device
time. The torch.distributed baseline is NCCL when every rank has
its own GPU, gloo on CPU, and skipped (with a note) when ranks share a GPU. With the copy
engine the all-gather is also timed into a symmetric ``out`` (``"copy_engine/symmetric-out"``:
eagerly on one GPU node it pushes straight into the peers' ``out``, no inbox), and with the
copy engine and the SM engine both all-gather and reduce-scatter into a preallocated plain
``out`` (``"<engine>/out"``: eagerly on one GPU node, from ``REPLAY_MIN_BYTES`` per peer, a
replayed CUDA graph of the call, ``ops/replays.py``), against NCCL into its preallocated
output as always.

With ``--graphs`` (GPU), all-reduce, all-gather, reduce-scatter and all-to-all (even
splits) up to ``--graph-max`` bytes are also timed under CUDA graphs, as the issue's
targets are stated: ``--graph-calls`` calls captured in one graph, the graph replayed a
fixed number of times, time per call = replay time / calls. Captured are Ditron's fused
kernels (``engine="sm"``, the graph-safe path: epochs on the device), for all-gather and
reduce-scatter also the copy engine's graph-safe chunked exchanges (warmed up inside
``ditron.ops.graph_safe()``), NCCL (when every rank has its own GPU) and, for all-reduce,
PyTorch's symmetric-memory kernels (``torch.ops.symm_mem.one_shot_all_reduce`` /
``two_shot_all_reduce_``).
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import torch
import torch.distributed as dist

from ..ops.collectives import ENGINES
from ..ops.graphs import capture
from ..runtime.arguments import (
    add_timing_options,
    byte_count,
    byte_counts,
    choice_list,
    output_dir,
    positive_int,
)
from ..runtime.launch import environment
from ..runtime.torch_dist import all_gather_single, reduce_scatter_single
from . import inside_world, provenance, write_json

_SMALL = ["4K", "64K"]
_DEFAULT_GPU = ["4K", "8K", "64K", "256K", "1M", "4M", "16M", "64M", "256M", "1G"]
_OPS = ("all_gather", "reduce_scatter", "all_reduce", "all_to_all")
_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}


def _parse(argv: list[str]) -> argparse.Namespace:
    return _parser().parse_args(argv)


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="ditron bench collectives", description=__doc__)
    p.add_argument("--world-size", type=positive_int, default=None,
                   help="ranks to launch (default: number of GPUs, or 2 on CPU)")
    p.add_argument("--backend", choices=("cpu", "cuda"), default=None,
                   help="default: DITRON_BACKEND, else cuda when a GPU is visible, else cpu")
    p.add_argument("--sizes", default=None, type=_size_spec,
                   help="'small', or comma list like 4K,1M,1G (default: 4K..1G on GPU, small "
                        "on CPU)")
    p.add_argument("--ops", default=",".join(_OPS), type=choice_list(_OPS),
                   help="a comma list of the collectives to time (default: all)")
    p.add_argument("--engines", default="copy_engine,sm", type=choice_list(ENGINES),
                   help=f"a comma list of {', '.join(ENGINES)} (default %(default)s)")
    p.add_argument("--dtype", choices=sorted(_DTYPES), default="bf16",
                   help="default %(default)s")
    add_timing_options(p, "5 on GPU, 1 on CPU", "20 on GPU, 3 on CPU")
    p.add_argument("--graphs", action="store_true",
                   help="also time all-reduce / all-gather / reduce-scatter / all-to-all under "
                        "CUDA graphs (GPU only)")
    p.add_argument("--busy", action="store_true",
                   help="also time calls issued back to back (rows '<impl> busy')")
    p.add_argument("--graph-max", default="4M", type=byte_count,
                   help="largest size timed under graphs, for every op --graphs times "
                        "(default %(default)s)")
    p.add_argument("--graph-calls", type=positive_int, default=50,
                   help="calls captured per graph (default %(default)s)")
    p.add_argument("--out", type=output_dir, default="bench/results/collectives",
                   help="folder for the results (default %(default)s)")
    return p


def _size_spec(text: str) -> str | list[int]:
    """``--sizes``: ``"small"`` or a comma list of byte counts."""
    return "small" if text == "small" else byte_counts(text)


def _sizes(spec: str | list[int] | None, backend: str) -> list[int]:
    if spec is None:
        spec = "small" if backend != "cuda" else byte_counts(",".join(_DEFAULT_GPU))
    return byte_counts(",".join(_SMALL)) if spec == "small" else spec


def main(argv: list[str]) -> int:
    import ditron

    from ..runtime.config import default_backend

    args = _parse(argv)
    args.argv = list(argv)  # for the results' provenance
    given = inside_world(_parser(), args.world_size, args.backend)
    backend = given[1] if given else args.backend or default_backend()
    sizes = _sizes(args.sizes, backend)
    if given:
        _run(args, sizes)
        return 0
    world = args.world_size or (max(torch.cuda.device_count(), 1) if backend == "cuda" else 2)
    # set for the ranks (they take the launching process's environment), then restored: a
    # caller of main from Python kept the benchmark's heap size for what it ran later
    with environment(**_heap_setting(world, sizes, backend)):
        ditron.launch(_run, world, args, sizes, backend=backend)
    return 0


def _heap_setting(world: int, sizes: list[int], backend: str) -> dict[str, str]:
    """``DITRON_HEAP_SIZE`` for ranks timing ``sizes`` on ``world`` ranks, unless the
    caller set it: room for the ops' workspaces at the largest size."""
    if "DITRON_HEAP_SIZE" in os.environ:
        return {}
    need = 6 * world * max(sizes) + (1 << 30)
    return {"DITRON_HEAP_SIZE": str(need if backend == "cuda" else max(need, 256 << 20))}


def _baseline_ok() -> tuple[bool, str]:
    from ..runtime.world import current

    rt = current()
    if rt.world.backend == "cpu":
        return True, "torch.distributed (gloo)"
    if rt.groups.device_backend == "nccl":
        return True, "torch.distributed (nccl)"
    return False, "no torch.distributed baseline: ranks share a GPU (NCCL refuses it)"


def _ops_for(name: str, size: int, dtype: torch.dtype, engines: list[str], base_ok: bool,
             symmetric: list[torch.Tensor]):
    """(impl label, callable) pairs for op ``name`` on a ``size``-byte tensor; symmetric
    buffers it allocates (collectively) are appended to ``symmetric`` for the caller to
    free."""
    import ditron

    from ..runtime.world import current

    rt = current()
    w, dev = rt.world.world_size, rt.world.device
    item = dtype.itemsize
    numel = max(size // item // w, 1) * w
    full = torch.randn(numel, device=dev).to(dtype)
    part = full[: numel // w].clone()
    ops = ditron.ops
    group = rt.groups.device
    out = []
    for eng in engines:
        if name == "all_gather":
            out.append((eng, lambda e=eng: ops.all_gather(part, engine=e)))
            if eng in ("copy_engine", "sm"):  # into a preallocated out: replayed graphs
                dst = torch.empty_like(full)
                out.append((f"{eng}/out",
                            lambda e=eng, o=dst: ops.all_gather(part, engine=e, out=o)))
            if eng == "copy_engine":  # into a symmetric out: straight into the peers' out
                sym = ditron.empty((numel,), dtype)
                symmetric.append(sym)
                out.append((f"{eng}/symmetric-out",
                            lambda o=sym: ops.all_gather(part, engine="copy_engine", out=o)))
        elif name == "reduce_scatter":
            out.append((eng, lambda e=eng: ops.reduce_scatter(full, engine=e)))
            if eng in ("copy_engine", "sm"):
                dst = torch.empty_like(part)
                out.append((f"{eng}/out",
                            lambda e=eng, o=dst: ops.reduce_scatter(full, engine=e, out=o)))
        elif name == "all_reduce":
            for m in ("one_shot", "two_shot"):
                if m == "one_shot" and size > (64 << 20):
                    continue
                out.append((f"{eng}/{m}", lambda e=eng, m=m: ops.all_reduce(full, m, engine=e)))
        elif name == "all_to_all":
            out.append((eng, lambda e=eng: ops.all_to_all(full, engine=e)))
    if base_ok:
        if name == "all_gather":
            dst = torch.empty_like(full)
            out.append(("torch", lambda: all_gather_single(dst, part, group=group)))
        elif name == "reduce_scatter":
            dst = torch.empty_like(part)
            out.append(("torch", lambda: reduce_scatter_single(dst, full, group=group)))
        elif name == "all_reduce":
            buf = torch.zeros_like(full)  # in place: zeros stay finite (:func:`_symm_mem_input`)
            out.append(("torch", lambda: dist.all_reduce(buf, group=group)))
        elif name == "all_to_all":
            dst = torch.empty_like(full)
            out.append(("torch", lambda: dist.all_to_all_single(dst, full, group=group)))
    return numel * item, out


def _rotating(fns: list, warmup: int, iters: int, busy: bool = False) -> list[float]:
    """Median seconds per call of each of ``fns``, timed in rounds whose order rotates (as
    many rounds as ``fns``, at least ``ROUNDS``; ``tune.tuner.rotations``), so a drift of the
    GPU's speed within a round costs every implementation alike; ``warmup`` calls before
    an implementation's first round, one before each later one; ``iters`` samples in all,
    rounded up to a multiple of the rounds and to at least 2 per round. Each sample an
    isolated call (:func:`_samples`), or with ``busy`` a call of a round's calls issued back
    to back (:func:`_busy_samples`). Collective: every rank gets the slowest rank's median
    (a rank that finished early only waited less for the others)."""
    from ..runtime.world import current
    from ..tune.tuner import rotations

    schedule = rotations(list(range(len(fns))), ROUNDS)
    per_round = max(2, -(-iters // max(len(schedule), 1)))
    sample = _busy_samples if busy else _samples
    samples: list[list[float]] = [[] for _ in fns]
    for r, order in enumerate(schedule):
        for i in order:
            samples[i] += sample(fns[i], warmup if r == 0 else 1, per_round)
    medians = torch.tensor([statistics.median(t) for t in samples], dtype=torch.float64)
    dist.all_reduce(medians, op=dist.ReduceOp.MAX, group=current().host_group)
    return medians.tolist()


def _samples(fn, warmup: int, iters: int) -> list[float]:
    """Seconds of ``iters`` isolated calls (device and host barrier before each) after
    ``warmup`` calls; every rank runs exactly ``warmup + iters`` calls."""
    from ..runtime.world import current

    rt = current()
    cuda = rt.world.device.type == "cuda"
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(iters):
        if cuda:
            torch.cuda.synchronize()
        dist.barrier(group=rt.host_group)
        if cuda:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end) / 1e3)
        else:
            t0 = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t0)
    return times


def _busy_samples(fn, warmup: int, iters: int) -> list[float]:
    """Seconds of each of ``iters`` calls issued back to back after ``warmup`` calls and one
    host barrier (events between consecutive calls on GPU, the host clock on CPU); every
    rank runs exactly ``warmup + iters`` calls."""
    from ..runtime.world import current

    rt = current()
    for _ in range(warmup):
        fn()
    if rt.world.device.type != "cuda":
        dist.barrier(group=rt.host_group)
        stamps = [time.perf_counter()]
        for _ in range(iters):
            fn()
            stamps.append(time.perf_counter())
        return [b - a for a, b in zip(stamps, stamps[1:], strict=False)]
    torch.cuda.synchronize()
    dist.barrier(group=rt.host_group)
    events = [torch.cuda.Event(enable_timing=True) for _ in range(iters + 1)]
    events[0].record()
    for i in range(iters):
        fn()
        events[i + 1].record()
    events[-1].synchronize()
    return [a.elapsed_time(b) / 1e3 for a, b in zip(events, events[1:], strict=False)]


_GRAPH_OPS = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all")
#: implementations are timed in at least this many rounds of rotating order
ROUNDS = 3


def _graph_impls(name: str, size: int, dtype: torch.dtype, base_ok: bool, calls: int,
                 warmup: int, iters: int) -> list[tuple[str, float]]:
    """Seconds per call of op ``name`` under CUDA graphs, per implementation (collective):
    Ditron's fused kernels, NCCL, and (all-reduce) PyTorch's symmetric-memory kernels."""
    import ditron

    from ..runtime.world import current

    rt = current()
    w, dev = rt.world.world_size, rt.world.device
    group = rt.groups.device
    item = dtype.itemsize
    numel = max(size // item // w, 1) * w
    x = torch.randn(numel, device=dev).to(dtype)
    ops = ditron.ops
    if name == "all_gather":
        part = x[: numel // w].clone()
        impls = [("sm graph", lambda: ops.all_gather(part, engine="sm")),
                 ("copy_engine graph", lambda: ops.all_gather(part, engine="copy_engine"))]
        if base_ok:
            dst = torch.empty_like(x)
            impls.append(("nccl graph",
                          lambda: all_gather_single(dst, part, group=group)))
        return _replay_each(impls, calls, warmup, iters)
    if name == "reduce_scatter":
        impls = [("sm graph", lambda: ops.reduce_scatter(x, engine="sm")),
                 ("copy_engine graph", lambda: ops.reduce_scatter(x, engine="copy_engine"))]
        if base_ok:
            dst = torch.empty(numel // w, dtype=dtype, device=dev)
            impls.append(("nccl graph", lambda: reduce_scatter_single(dst, x, group=group)))
        return _replay_each(impls, calls, warmup, iters)
    if name == "all_to_all":
        impls = [("sm graph", lambda: ops.all_to_all(x, engine="sm"))]
        if base_ok:
            dst = torch.empty_like(x)
            impls.append(("nccl graph", lambda: dist.all_to_all_single(dst, x, group=group)))
        return _replay_each(impls, calls, warmup, iters)
    impls = [(f"sm/{m} graph", lambda m=m: ops.all_reduce(x, m, engine="sm"))
             for m in ("one_shot", "two_shot", "auto")]
    if base_ok:
        buf = torch.zeros_like(x)  # in place: zeros stay finite (:func:`_symm_mem_input`)
        impls.append(("nccl graph", lambda: dist.all_reduce(buf, group=group)))
    symm = _symm_mem_input(x)
    if symm is not None:
        t, group_name = symm
        impls.append(("symm_mem one_shot graph",
                      lambda: torch.ops.symm_mem.one_shot_all_reduce(t, "sum", group_name)))
        impls.append(("symm_mem two_shot graph",
                      lambda: torch.ops.symm_mem.two_shot_all_reduce_(t, "sum", group_name)))
    return _replay_each(impls, calls, warmup, iters)


def _replay_each(impls, calls: int, warmup: int, iters: int) -> list[tuple[str, float]]:
    """Capture ``calls`` calls of each implementation in a graph, then time the replays in
    rotating rounds (:func:`_rotating`); seconds per call."""
    graphs = [capture(fn, calls) for _, fn in impls]
    per_replay = _rotating([g.replay for g in graphs], max(warmup // 2, 1), iters)
    del graphs
    return [(label, t / calls) for (label, _), t in zip(impls, per_replay, strict=True)]


def _symm_mem_input(x: torch.Tensor):
    """A PyTorch symmetric-memory buffer of ``x``'s size and dtype, zero-filled, with the
    group name its ops take. Zero-filled because ``two_shot_all_reduce_`` sums in place: each
    call multiplied data by the world size (bf16 reached inf within ~40 calls at 8 ranks);
    the kernels' speed does not depend on the values. ``None`` on every rank when torch's
    symmetric memory is unavailable on any (the ranks must time the same implementations: a
    rank failing alone left its peers in the rendezvous, or timing a baseline it skipped)."""
    from ..runtime.world import current
    from ..tune.tuner import all_ok

    t, name, why = None, None, None
    try:
        import torch.distributed._symmetric_memory as symm_mem

        name = current().groups.device.group_name
        t = symm_mem.empty(x.numel(), dtype=x.dtype, device=x.device)
    except Exception as exc:  # noqa: BLE001 - a baseline that cannot run is reported, not fatal
        why = exc
    if all_ok(why is None):
        try:
            symm_mem.rendezvous(t, name)
            t.zero_()
        except Exception as exc:  # noqa: BLE001 - as above
            why = exc
        if all_ok(why is None):
            return t, name
    print("[bench] no symm_mem baseline" + (f": {type(why).__name__}: {why}" if why else
                                          " (not on every rank)"))
    return None


def _record(op: str, impl: str, nbytes: int, seconds: float, w: int) -> dict:
    """One measurement; rank 0 also prints it at once, so a run cut short keeps its rows."""
    from ..runtime.world import current

    factor = (2 if op == "all_reduce" else 1) * (w - 1) / max(w, 1)
    r = dict(op=op, impl=impl, bytes=nbytes, us=seconds * 1e6,
             algbw_GBps=nbytes / seconds / 1e9, busbw_GBps=nbytes / seconds / 1e9 * factor)
    if current().world.rank == 0:
        print(f"[bench] {op} {impl} {nbytes} B: {r['us']:.1f} us, "
              f"busbw {r['busbw_GBps']:.2f} GB/s", flush=True)
    return r


def _run(args: argparse.Namespace, sizes: list[int]) -> None:
    import ditron

    from ..ops.workspaces import release_workspaces
    from ..runtime.world import current

    rt = current()
    w = rt.world.world_size
    cuda = rt.world.device.type == "cuda"
    warmup = args.warmup if args.warmup is not None else (5 if cuda else 1)
    iters = args.iters if args.iters is not None else (20 if cuda else 3)
    dtype = _DTYPES[args.dtype]
    engines = args.engines
    base_ok, base_note = _baseline_ok()
    graphs = args.graphs and cuda
    if args.graphs and not cuda and rt.world.rank == 0:
        print("--graphs: CUDA graphs need the cuda backend; timing eagerly only")
    graph_max = args.graph_max
    records = []
    for name in args.ops:
        for size in sizes:
            symmetric: list[torch.Tensor] = []
            nbytes, impls = _ops_for(name, size, dtype, engines, base_ok, symmetric)
            for (label, _), t in zip(impls, _rotating([fn for _, fn in impls], warmup, iters),
                                     strict=True):
                records.append(_record(name, label, nbytes, t, w))
            if args.busy:  # the same rotating rounds, each call issued back to back
                for (label, _), t in zip(impls, _rotating([fn for _, fn in impls], warmup,
                                                          iters, busy=True), strict=True):
                    records.append(_record(name, f"{label} busy", nbytes, t, w))
            if name in _GRAPH_OPS and graphs and size <= graph_max:
                for label, t in _graph_impls(name, size, dtype, base_ok, args.graph_calls,
                                             warmup, iters):
                    records.append(_record(name, label, nbytes, t, w))
            for t in symmetric:
                ditron.free(t)
            release_workspaces()
            if cuda:
                torch.cuda.empty_cache()
    if rt.world.rank == 0:
        meta = provenance("collectives", getattr(args, "argv", None), rt.world.backend,
                          world_size=w, dtype=args.dtype, warmup=warmup, iters=iters,
                          baseline=base_note, cuda_graphs=graphs, busy=args.busy,
                          graph_calls=args.graph_calls if graphs else 0)
        _report(records, meta, args.out)


def _report(records: list[dict], meta: dict, out: str) -> None:
    os.makedirs(out, exist_ok=True)
    print(f"# collectives: {meta}")
    # columns as wide as their longest entry ("copy_engine/symmetric-out busy" is 30 wide)
    wo = max([15] + [len(r["op"]) + 2 for r in records])
    wi = max([24] + [len(r["impl"]) + 2 for r in records])
    print(f"{'op':<{wo}}{'impl':<{wi}}{'bytes':>12}{'time us':>12}{'algbw GB/s':>12}"
          f"{'busbw GB/s':>12}")
    for r in records:
        print(f"{r['op']:<{wo}}{r['impl']:<{wi}}{r['bytes']:>12}{r['us']:>12.1f}"
              f"{r['algbw_GBps']:>12.2f}{r['busbw_GBps']:>12.2f}")
    write_json(os.path.join(out, "collectives.json"), dict(meta=meta, records=records))
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib is not installed: no plot written (pip install matplotlib)")
        return
    ops = sorted({r["op"] for r in records})
    fig, axes = plt.subplots(2, len(ops), figsize=(5 * len(ops), 8), squeeze=False)
    for j, op in enumerate(ops):
        for impl in sorted({r["impl"] for r in records if r["op"] == op}):
            rs = [r for r in records if r["op"] == op and r["impl"] == impl]
            xs = [r["bytes"] for r in rs]
            axes[0][j].plot(xs, [r["busbw_GBps"] for r in rs], marker="o", label=impl)
            axes[1][j].plot(xs, [r["us"] for r in rs], marker="o", label=impl)
        axes[0][j].set_title(op)
        axes[0][j].set_ylabel("bus bandwidth (GB/s)")
        axes[1][j].set_ylabel("latency (us)")
        for ax in (axes[0][j], axes[1][j]):
            ax.set_xscale("log", base=2)
            ax.set_xlabel("bytes")
            ax.legend(fontsize=7)
        axes[1][j].set_yscale("log")
    fig.tight_layout()
    fig.savefig(os.path.join(out, "collectives.png"), dpi=120)
    print(f"wrote {out}/collectives.json and collectives.png")


if __name__ == "__main__":
    import sys

    raise SystemExit(main(sys.argv[1:]))
