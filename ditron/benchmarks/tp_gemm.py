"""``ditron bench tp-gemm``: overlapped TP GEMMs vs torch.matmul + torch.distributed.

Shapes: REFERENCES.md (M = 8192 global tokens; AG-GEMM ``C[M, N/W] = AG(A[M/W, K]) @
B[K, N/W]``, GEMM-RS ``C[M/W, N] = RS(A[M, K/W] @ B[K/W, N])``), as published where the
split dimensions divide by W, multiplied by ``--scale`` (rounded to multiples of 64, 64 W
for the split ones) for fewer GPUs or less memory; ``--shapes NxK,...`` keeps a
subset (unscaled ``N x K``, as in ``AG_SHAPES`` / ``RS_SHAPES``); ``--smoke`` uses tiny
shapes (CPU). Per shape, in the same run and with the same fixed warm-up / timed call counts
on every rank (CUDA events on GPU, host clock on CPU; each sample times ``--batch`` calls
back to back, as a busy stream runs them; the candidates take turns over at least ``ROUNDS``
rounds and as many as there are candidates, in an order that rotates, so each runs at each
position of a round; the slowest rank's median of all samples):

* ``T_gemm``: the rank's local GEMM with ``torch.matmul`` (AG-GEMM: of the gathered rows);
  ``T_comm``: the collective alone;
* ``baseline``: ``method="fallback"`` (torch.matmul + NCCL, not overlapped);
* ``ditron``: ``method="overlap"``; ``auto``: what users get by default;
* ``torch_fused``: ``torch.ops.symm_mem.fused_all_gather_matmul`` /
  ``fused_matmul_reduce_scatter`` when available (CUDA only).

With ``--tune`` the tuner runs per shape first (its decision, cached on disk, is what
``auto`` takes, on GPUs one for eager calls and one for CUDA graphs; both are reported in
the JSON and after each table).

With ``--graphs`` (GPU) ``T_gemm``, ``T_comm``, the baseline, ``ditron``, ``auto`` and, for
GEMM-RS, ``ditron_ce`` (``method="overlap", engine="copy_engine"``), and each op's other
engine (``ALT``, also timed eagerly: ``ditron_pull``, GEMM-RS with
``engine="copy_engine_pull"``, or ``ditron_<engine>`` with ``--alt-rs <engine>``;
``ditron_matmul``, AG-GEMM with ``engine="copy_engine_matmul"``) are also timed under CUDA
graphs (``--batch`` calls captured in one graph per candidate; the replays timed in the same
rotating rounds; Ditron's calls take their graph-safe variants, warmed up inside
``ditron.ops.graph_safe()``): no launch cost on either side. Keys ``graph_*``; a second
table.

Reported: speedup = baseline / ditron, and overlap efficiency = max(T_gemm, T_comm) / T_op
(1.0 = the ideal overlap bound). Writes a table to stdout and ``tp_gemm.json`` / ``.png``.
"""

from __future__ import annotations

import argparse
import os
import sys
import warnings

import torch

from ..ops.graphs import capture, collectives_capturable
from ..ops.tp_gemm import RS_ENGINES
from ..runtime.arguments import (
    add_timing_options,
    choice_list,
    output_dir,
    positive_float,
    positive_int,
    smoke_defaults,
)
from ..runtime.torch_dist import all_gather_single, reduce_scatter_single
from ..runtime.world import current
from . import inside_world, provenance, write_json

AG_SHAPES = [(11008, 4096), (14336, 4096), (28672, 8192), (53248, 16384), (29568, 8192),
             (49152, 12288)]
RS_SHAPES = [(4096, 11008), (4096, 14336), (3584, 14336), (4608, 36864), (8192, 28672),
             (8192, 29568)]
DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}
#: candidates are timed in at least this many interleaved rounds, and in as many as there
#: are candidates, each round's order a rotation of the last (``--iters`` samples in all,
#: rounded up to a multiple of the rounds and to at least 2 per round)
ROUNDS = 3

#: each op's other overlapped engine, timed beside its default one: (result key, engine)
ALT = {"ag_gemm": ("ditron_matmul", "copy_engine_matmul"),
       "gemm_rs": ("ditron_pull", "copy_engine_pull")}


def _round(x: float, q: int = 64) -> int:
    return max(q, int(round(x / q)) * q)


def _dim(x: int, scale: float, q: int = 64) -> int:
    """A REFERENCES.md dimension ``x`` times ``scale``: ``x`` itself at scale 1 where it
    divides by ``q // 64`` (the ranks it is split over), else rounded to a multiple of ``q``
    (at 8 ranks, rounding every shape made LLaMA-7B's N = 11008 into 11264, and at 4 and 8
    Qwen2-72B's 29568 into 29696: not the published shapes the results are compared with)."""
    return x if scale == 1 and x % (q // 64) == 0 else _round(x * scale, q)


def shapes(ops: list[str], scale: float, smoke: bool, W: int,
           only: str = "") -> list[tuple[str, int, int, int]]:
    """(op, M global, N global, K global) rows. ``only``: ``"NxK,..."``, a subset of the
    REFERENCES.md shapes by their unscaled ``N x K`` (``smoke`` has tiny shapes instead)."""
    if not ops or set(ops) - {"ag", "rs"}:
        raise ValueError(f"--ops: a comma list of ag and rs, got {','.join(ops)!r}")
    if only.strip() and smoke:
        raise ValueError("--shapes picks REFERENCES.md shapes, but --smoke (the default on the "
                         "CPU backend) runs tiny ones")
    known = set(AG_SHAPES if "ag" in ops else []) | set(RS_SHAPES if "rs" in ops else [])
    picked = None
    if only.strip():
        picked = set()
        for item in only.split(","):
            n, _, k = item.strip().lower().partition("x")
            if not (n.isdigit() and k.isdigit()) or (int(n), int(k)) not in known:
                names = ", ".join(f"{n}x{k}" for n, k in sorted(known))
                raise ValueError(f"--shapes: {item.strip()!r} is not one of the shapes of "
                                 f"--ops ({names})")
            picked.add((int(n), int(k)))
    keep = lambda nk: picked is None or nk in picked  # noqa: E731
    if smoke:
        rows = []
        if "ag" in ops:
            rows.append(("ag_gemm", 16 * W + 8 * W, 48 * W, 40))
        if "rs" in ops:
            rows.append(("gemm_rs", 24 * W, 40, 24 * W))
        return rows
    out = []
    M = _dim(8192, scale, 64 * W)
    if "ag" in ops:
        out += [("ag_gemm", M, _dim(n, scale, 64 * W), _dim(k, scale))
                for n, k in AG_SHAPES if keep((n, k))]
    if "rs" in ops:
        out += [("gemm_rs", M, _dim(n, scale), _dim(k, scale, 64 * W))
                for n, k in RS_SHAPES if keep((n, k))]
    return out


def _fused(op: str, a, b):
    """PyTorch's fused op as a callable, or None where unavailable."""
    if a.device.type != "cuda":
        return None
    try:
        import torch.distributed._symmetric_memory as symm_mem

        group = current().groups.device
        with warnings.catch_warnings():  # needed by older torch; deprecated (a no-op) later
            warnings.simplefilter("ignore", FutureWarning)
            symm_mem.enable_symm_mem_for_group(group.group_name)
        if op == "ag_gemm":
            return lambda: torch.ops.symm_mem.fused_all_gather_matmul(
                a, [b], gather_dim=0, group_name=group.group_name)
        return lambda: torch.ops.symm_mem.fused_matmul_reduce_scatter(
            a, b, "sum", scatter_dim=0, group_name=group.group_name)
    except Exception:  # noqa: BLE001
        return None


def _measure(rows, dtype, warmup: int, iters: int, tune: bool = False,
             batch: int = 1, graphs: bool = False, alt_rs: str | None = None) -> list[dict]:
    return [_measure_one(op, M, N, K, dtype, warmup, iters, tune, batch, graphs, alt_rs)
            for op, M, N, K in rows]


def _tune(op: str, M: int, N: int, K: int, dtype) -> dict:
    """Run the tuner for this shape (shapes as one rank's op sees them); its decision is
    what ``method="auto"`` then takes."""
    import ditron
    from ditron.tune.tuner import tune

    W = ditron.world().world_size
    if op == "ag_gemm":
        decision = tune(op, M, N // W, K, dtype, progress=ditron.world().rank == 0)
    else:
        decision = tune(op, M, N, K // W, dtype, progress=ditron.world().rank == 0)
    row = {"tuned_method": decision.method, "tuned_config": decision.config.label(),
           "tuned_engine": decision.engine, "tuned_chunk_rows": decision.chunk_rows,
           "tuned_early_rows": decision.early_rows}
    if decision.graph is not None:  # what "auto" takes under CUDA graphs
        g = decision.graph
        row.update({"tuned_graph_method": g.method, "tuned_graph_config": g.config.label(),
                    "tuned_graph_engine": g.engine, "tuned_graph_chunk_rows": g.chunk_rows,
                    "tuned_graph_early_rows": g.early_rows})
    return row


def _measure_one(op: str, M: int, N: int, K: int, dtype, warmup: int, iters: int,
                 tune: bool = False, batch: int = 1, graphs: bool = False,
                 alt_rs: str | None = None) -> dict:
    import ditron
    from ditron.tune.tuner import agreed_median, all_ok, rotations, time_calls

    w = ditron.world()
    W, dev = w.world_size, w.device
    group = current().groups.device
    torch.manual_seed(w.rank)
    if op == "ag_gemm":
        a = torch.randn(M // W, K, device=dev).to(dtype)
        b = torch.randn(N // W, K, device=dev).to(dtype).t()  # a transposed weight
        full_a = torch.empty(M, K, device=dev, dtype=dtype)
        gemm = lambda: torch.matmul(full_a, b)  # noqa: E731
        comm = lambda: all_gather_single(full_a, a, group=group)  # noqa: E731
        # T_gemm multiplies the gathered rows: it is timed first, and timed the buffer's
        # uninitialized memory there (zeros, on a fresh allocation, run faster: METHOD.md)
        comm()
    else:
        a = torch.randn(M, K // W, device=dev).to(dtype)
        b = torch.randn(N, K // W, device=dev).to(dtype).t()
        part = torch.matmul(a, b)
        out = torch.empty(M // W, N, device=dev, dtype=dtype)
        gemm = lambda: torch.matmul(a, b)  # noqa: E731
        comm = lambda: reduce_scatter_single(out, part, group=group)  # noqa: E731
    fn = getattr(ditron.ops, op)
    row = {"op": op, "M": M, "N": N, "K": K, "world_size": W, "dtype": str(dtype)}
    if tune:
        row.update(_tune(op, M, N, K, dtype))
    cands = {"t_gemm": gemm, "t_comm": comm,
             "baseline": lambda: fn(a, b, method="fallback"),
             "ditron": lambda: fn(a, b, method="overlap"),
             "auto": lambda: fn(a, b, method="auto")}
    fused = _fused(op, a, b.contiguous() if op == "ag_gemm" else b)
    if all_ok(fused is not None):
        cands["torch_fused"] = fused
    if W > 1:  # each op's other engine, timed beside its default one
        alt_key, alt_engine = ALT[op]
        if op == "gemm_rs" and alt_rs and alt_rs != alt_engine:
            alt_key, alt_engine = f"ditron_{alt_rs}", alt_rs
        row["alt"], row["alt_engine"] = alt_key, alt_engine
        cands[alt_key] = lambda: fn(a, b, method="overlap", engine=alt_engine)
    graph_cands = dict(cands)
    if op == "gemm_rs" and W > 1:
        graph_cands["ditron_ce"] = lambda: fn(a, b, method="overlap", engine="copy_engine")
    # rounds: every candidate is timed in each round, so a drift of the machine's speed
    # during the run (clocks, memory, the other rank) affects all of them alike; the order
    # rotates from round to round, so no candidate always follows the same one
    samples: dict[str, list[float]] = {name: [] for name in cands}
    schedule = rotations(list(cands), ROUNDS)
    per_round = max(2, -(-iters // len(schedule)))
    for r, order in enumerate(schedule):
        for name in order:
            f = cands[name]
            if samples[name] and samples[name][0] == float("inf"):
                continue  # failed in an earlier round (on some rank)
            try:
                times = time_calls(f, warmup if r == 0 else 1, per_round, dev, batch)
            except Exception as exc:  # noqa: BLE001 - report, keep benchmarking
                times = [float("inf")]
                row[f"{name}_error"] = f"{type(exc).__name__}: {exc}"[:200]
            if agreed_median(times) == float("inf"):  # every rank joins, failed or not
                times = [float("inf")]
            samples[name] = times if times[0] == float("inf") else samples[name] + times
    for name, times in samples.items():
        t = agreed_median(times)
        row[name] = t if t != float("inf") else None
    if graphs and dev.type == "cuda":
        # one graph of ``batch`` calls per candidate, replays timed in rotating rounds
        captured = {}
        for name in ("t_gemm", "t_comm", "baseline", "ditron", "auto", "ditron_ce",
                     row.get("alt", "")):
            if name not in graph_cands or (name in ("t_comm", "baseline")
                                           and not collectives_capturable()):
                continue
            try:
                graph = capture(graph_cands[name], batch,
                                 safe_warm_up=name.startswith(("ditron", "auto")))
            except Exception as exc:  # noqa: BLE001 - report, keep benchmarking
                graph = None
                row[f"graph_{name}_error"] = f"{type(exc).__name__}: {exc}"[:200]
            if all_ok(graph is not None):
                captured[name] = graph
            row[f"graph_{name}"] = None
        gsamples: dict[str, list[float]] = {name: [] for name in captured}
        gschedule = rotations(list(captured), ROUNDS)
        gper_round = max(2, -(-iters // max(len(gschedule), 1)))
        for r, order in enumerate(gschedule):
            for name in order:
                times = time_calls(captured[name].replay, warmup if r == 0 else 1, gper_round,
                                   dev)
                gsamples[name] += [t / batch for t in times]
        for name in captured:
            row[f"graph_{name}"] = agreed_median(gsamples[name])
        del captured
    for prefix in ("", "graph_"):
        t_gemm, t_comm = row.get(f"{prefix}t_gemm"), row.get(f"{prefix}t_comm")
        if not (t_gemm and t_comm):
            continue  # the bound needs both (T_comm is not captured where gloo runs it)
        for name in ("baseline", "ditron", "auto", "torch_fused", "ditron_ce",
                     row.get("alt", "")):
            if row.get(prefix + name):
                row[f"{prefix}eff_{name}"] = max(t_gemm, t_comm) / row[prefix + name]
        if row.get(prefix + "ditron") and row.get(prefix + "baseline"):
            row[prefix + "speedup"] = row[prefix + "baseline"] / row[prefix + "ditron"]
    return row


def alt(row: dict) -> str:
    """The result key of ``row``'s other engine (``ALT``, or ``--alt-rs``)."""
    return row.get("alt") or ALT[row["op"]][0]


def _cell(value: float | None, width: int, digits: int = 2) -> str:
    """``value`` right-aligned in ``width`` columns, ``-`` where it was not measured."""
    return f"{value:{width}.{digits}f}" if isinstance(value, float) else f"{'-':>{width}}"


def _table(results: list[dict]) -> str:
    head = (f"{'op':8} {'M':>6} {'N':>6} {'K':>6} {'T_gemm':>9} {'T_comm':>9} {'base':>9} "
            f"{'ditron':>9} {'auto':>9} {'fused':>9} {'alt':>9} {'speedup':>7} {'eff':>5} "
            f"{'eff_auto':>8} {'eff_alt':>7} {'eff_base':>8}")
    lines = [head, "-" * len(head)]
    f = lambda v: _cell(v, 9, 1)  # noqa: E731
    for r in results:
        lines.append(f"{r['op']:8} {r['M']:6} {r['N']:6} {r['K']:6} {f(r['t_gemm'])} "
                     f"{f(r['t_comm'])} {f(r.get('baseline'))} {f(r.get('ditron'))} "
                     f"{f(r.get('auto'))} {f(r.get('torch_fused'))} {f(r.get(alt(r)))} "
                     f"{_cell(r.get('speedup'), 7, 3)} "
                     f"{_cell(r.get('eff_ditron'), 5)} {_cell(r.get('eff_auto'), 8)} "
                     f"{_cell(r.get('eff_' + alt(r)), 7)} {_cell(r.get('eff_baseline'), 8)}"
                     + (f"  auto={r['tuned_method']}/{r['tuned_engine']}"
                        f"/chunk={r['tuned_chunk_rows']}{_early(r.get('tuned_early_rows'))}"
                        if "tuned_method" in r else ""))
    lines.append("times in us (median, slowest rank); eff = max(T_gemm, T_comm) / T_op; "
                 "ditron = method='overlap' (default engine and tiles), auto = the default "
                 "call (the tuned decision when one is cached); alt = method='overlap' with "
                 "engine=" + "/".join(sorted({repr(r.get("alt_engine", ALT[r["op"]][1]))
                                              for r in results})))
    if any("graph_ditron" in r for r in results):
        head = (f"{'op':8} {'M':>6} {'N':>6} {'K':>6} {'T_gemm':>9} {'T_comm':>9} {'base':>9} "
                f"{'ditron':>9} {'auto':>9} {'ce':>9} {'alt':>9} {'speedup':>7} {'eff':>5} "
                f"{'eff_auto':>8} {'eff_ce':>6} {'eff_alt':>7} {'eff_base':>8}")
        lines += ["", "under CUDA graphs", head, "-" * len(head)]
        for r in results:
            lines.append(f"{r['op']:8} {r['M']:6} {r['N']:6} {r['K']:6} "
                         f"{f(r.get('graph_t_gemm'))} {f(r.get('graph_t_comm'))} "
                         f"{f(r.get('graph_baseline'))} {f(r.get('graph_ditron'))} "
                         f"{f(r.get('graph_auto'))} {f(r.get('graph_ditron_ce'))} "
                         f"{f(r.get('graph_' + alt(r)))} "
                         f"{_cell(r.get('graph_speedup'), 7, 3)} "
                         f"{_cell(r.get('graph_eff_ditron'), 5)} "
                         f"{_cell(r.get('graph_eff_auto'), 8)} "
                         f"{_cell(r.get('graph_eff_ditron_ce'), 6)} "
                         f"{_cell(r.get('graph_eff_' + alt(r)), 7)} "
                         f"{_cell(r.get('graph_eff_baseline'), 8)}"
                         + (f"  auto={r['tuned_graph_method']}/{r['tuned_graph_engine']}"
                            f"/chunk={r['tuned_graph_chunk_rows']}"
                            f"{_early(r.get('tuned_graph_early_rows'))}"
                            if "tuned_graph_method" in r else ""))
        if any("graph_ditron_ce" in r for r in results):
            lines.append("ce = GEMM-RS with method='overlap', engine='copy_engine'")
    return "\n".join(lines)


def _early(rows: int | None) -> str:
    return f"/early={rows}" if rows else ""


def _plot(results: list[dict], path: str) -> bool:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    labels = [f"{r['op']}\n{r['N']}x{r['K']}" for r in results]
    fig, ax = plt.subplots(figsize=(max(6, 1.2 * len(results)), 4))
    x = range(len(results))
    keys = ("eff_baseline", "eff_ditron", "eff_auto", "eff_torch_fused")
    for i, key in enumerate(keys):
        ax.bar([v + 0.2 * (i - 1.5) for v in x], [r.get(key) or 0 for r in results], 0.2,
               label=key.removeprefix("eff_"))
    ax.axhline(1.0, color="k", lw=0.8)
    ax.set_xticks(list(x), labels, fontsize=7)
    ax.set_ylabel("max(T_gemm, T_comm) / T_op")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return True


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="ditron bench tp-gemm", description=__doc__.split("\n")[0])
    p.add_argument("--world-size", type=positive_int, default=None,
                   help="ranks to launch (default: the number of GPUs, or 2 on CPU)")
    p.add_argument("--scale", type=positive_float, default=None,
                   help="multiply the REFERENCES.md shapes, rounded to multiples of 64 (default "
                        "1: the full shapes)")
    p.add_argument("--ops", default="ag,rs", type=choice_list(("ag", "rs")),
                   help="a comma list of ag (AG-GEMM) and rs (GEMM-RS) (default %(default)s)")
    p.add_argument("--shapes", default="",
                   help="only these REFERENCES.md shapes, as unscaled NxK (e.g. 4096x11008)")
    p.add_argument("--dtype", choices=list(DTYPES), default="bf16",
                   help="default %(default)s")
    add_timing_options(p, 5, 10)
    p.add_argument("--smoke", action="store_true",
                   help="tiny shapes (the default on the CPU backend), timed with --warmup 1 "
                        "--iters 3 unless given")
    p.add_argument("--out", type=output_dir, default=os.environ.get("OUT", "bench/results"),
                   help="folder for the results (default: $OUT, else bench/results)")
    p.add_argument("--backend", choices=["cpu", "cuda"], default=None,
                   help="default: DITRON_BACKEND, else cuda when a GPU is visible, else cpu")
    p.add_argument("--batch", type=positive_int, default=None,
                   help="calls timed back to back per sample (default 5 on GPU, 1 on CPU): "
                        "launch cost then shows only where it exceeds the GPU time")
    p.add_argument("--tune", action="store_true",
                   help="run the tuner per shape first (cached on disk; 'auto' then uses it)")
    p.add_argument("--alt-rs", default=None, choices=RS_ENGINES,
                   help="the GEMM-RS engine timed in the 'alt' column (default: "
                        "copy_engine_pull)")
    p.add_argument("--graphs", action="store_true",
                   help="also time the GEMM, the collective, the baseline and the overlapped "
                        "op under CUDA graphs (GPU only)")
    args = p.parse_args(argv)
    import ditron
    from ditron.runtime.config import default_backend

    given = inside_world(p, args.world_size, args.backend)
    backend = given[1] if given else args.backend or default_backend()
    if backend == "cuda" and not torch.cuda.is_available():  # before any rank starts
        p.error("no CUDA device is visible: it times GPUs (--backend cpu or --smoke runs tiny "
                "shapes on the CPU backend)")
    W = given[0] if given else (args.world_size or
                                (torch.cuda.device_count() if backend == "cuda" else 2))
    if W == 1:  # every op falls back: the ratios would compare a call with itself
        why = ("a world of one rank" if given else
               "--world-size 1" if args.world_size else "one GPU visible")
        p.error(f"{why}: one rank has nothing to overlap (the ops run the local GEMM alone); "
                f"give --world-size 2 or more (ranks may share a GPU)")
    smoke = args.smoke or backend == "cpu"
    if smoke and args.scale is not None:  # it used to be ignored
        p.error("--scale scales the REFERENCES.md shapes, but --smoke (the default on the CPU "
                "backend) runs tiny ones")
    scale = args.scale if args.scale is not None else 1.0
    try:
        rows = shapes(args.ops, scale, smoke, W, args.shapes)
    except ValueError as exc:
        p.error(str(exc))
    dtype = DTYPES[args.dtype]
    if args.graphs and backend != "cuda":  # it was ignored without a word
        print("--graphs: CUDA graphs need the cuda backend; timing eagerly only",
              file=sys.stderr)
        args.graphs = False
    if smoke:
        smoke_defaults(p, argv, args, {}, {"warmup": 1, "iters": 3})
    batch = args.batch or (5 if backend == "cuda" else 1)
    if given:
        results = _measure(rows, dtype, args.warmup, args.iters, args.tune, batch,
                           args.graphs, args.alt_rs)
        if ditron.world().rank != 0:
            return 0
    else:
        results = ditron.launch(_measure, W, rows, dtype, args.warmup, args.iters, args.tune,
                                batch, args.graphs, args.alt_rs, backend=backend)[0]
    print(_table(results))
    os.makedirs(args.out, exist_ok=True)
    meta = provenance("tp-gemm", argv, backend, world_size=W, dtype=args.dtype,
                      warmup=args.warmup, iters=args.iters, batch=batch, tune=args.tune,
                      cuda_graphs=args.graphs, scale=scale)
    write_json(os.path.join(args.out, "tp_gemm.json"), {"meta": meta, "results": results})
    _plot(results, os.path.join(args.out, "tp_gemm.png"))
    print(f"wrote {args.out}/tp_gemm.json", file=sys.stderr)
    return 0
