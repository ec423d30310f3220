"""Time a decode-size MLP stack as one megakernel (``ditron.task``) against torch.

    python -m ditron bench megakernel --shape 16,4096,11008 --layers 4 --out mk.json

Each of ``--layers`` layers is ``x = all_reduce(silu(x @ Wg) * (x @ Wu) @ Wd) + x`` with
``x`` ``[tokens, hidden]`` replicated and the weights this rank's shards of a ``ffn``-wide MLP
(``ditron.task.tp_mlp``), bf16. Variants, timed in the same processes in rounds whose order
rotates: ``megakernel`` for each ``--blocks`` tile configuration (one launch per call),
``torch`` (cuBLAS and elementwise kernels, ``torch.distributed.all_reduce`` when
``W > 1``: six to seven launches per layer) and, at one rank, ``torch_graph`` (the same calls
replayed from a CUDA graph) and, on a GPU, ``megakernel_graph`` (each megakernel's launch
replayed from a CUDA graph). Per-call times are the slower rank's median (CUDA events, fixed
counts on every rank, warm-up excluded), for one call from an idle GPU (``batch 1``) and
for calls back to back (``batch 8``: the host runs ahead), and the GPU's own time per call
(``kernels``: the sum of the kernels' durations, from the profiler) and the host's
(``host``: the launch cost, timed while the GPU runs behind). Every megakernel output is
checked against ``torch``'s on every rank (``max_rel_error``: the worst rank's, NaN where
any rank's is); a configuration whose build fails (say, more shared memory
than the GPU has) is reported and left out on every rank. ``--tune`` first runs
``ditron.task.tp_mlp_tuner.tune_mlp`` for the shape (with ``--warmup`` and ``--iters``) and
times its choice too. ``--smoke`` runs tiny shapes (by default in ``16x16x16x32x2`` tiles) on
the CPU backend to check the script; its times mean nothing.
"""

from __future__ import annotations

import argparse
import time

import torch
import torch.distributed as dist

import ditron
from ditron import trace
from ditron.benchmarks import provenance, worst, write_json
from ditron.kernels.tile_config import WARPS
from ditron.runtime.arguments import (
    add_timing_options,
    int_list,
    output_file,
    positive_int,
    smoke_defaults,
)
from ditron.runtime.world import current
from ditron.task.tp_mlp import MlpBlocks, default_blocks
from ditron.tune.tuner import agreed_median, all_ok, kernel_time, time_in_rounds


def _measure(tokens: int, hidden: int, ffn: int, layers: int, blocks: list[str], warmup: int,
             iters: int, rounds: int, stages: int | None, programs: int | None,
             trace_prefix: str | None = None, warps: int | None = None, inline: bool = False,
             layout: str = "linear", tune: bool = False) -> dict:
    from ditron import task as dt
    from ditron.task.tp_mlp import add_tp_mlp_stack
    from ditron.task.tp_mlp_tuner import tune_mlp

    w = ditron.world()
    W, dev = w.world_size, w.device
    group = current().groups.device
    dtype = torch.bfloat16
    tuned = {}
    if tune:
        start = time.perf_counter()
        chosen = tune_mlp(tokens, hidden, ffn, dtype, programs=programs, warmup=warmup,
                          iters=iters, progress=w.rank == 0,
                          layout="t" if layout == "linear" else "n").label()
        tuned = {"blocks": chosen, "tune_s": time.perf_counter() - start}
        blocks = blocks + [chosen] * (chosen not in blocks)
    F = ffn // W
    torch.manual_seed(1)  # the replicated input and residual stream
    x0 = torch.randn(tokens, hidden, device=dev, dtype=dtype)
    torch.manual_seed(100 + w.rank)

    def weight(k, n, scale):  # a [k, n] weight, stored as the layout says
        if layout == "linear":  # nn.Linear's [out, in], used transposed
            return (torch.randn(n, k, device=dev, dtype=dtype) / scale).t()
        return torch.randn(k, n, device=dev, dtype=dtype) / scale

    weights = [(weight(hidden, F, hidden ** 0.5), weight(hidden, F, hidden ** 0.5),
                weight(F, hidden, ffn ** 0.5)) for _ in range(layers)]

    def torch_mlp():
        x = x0
        for wg, wu, wd in weights:
            p = (torch.nn.functional.silu(x @ wg) * (x @ wu)) @ wd
            if W > 1:
                dist.all_reduce(p, group=group)
            x = p + x
        return x

    cands = {"torch": torch_mlp}
    ref = torch_mlp().float()
    errors, build, traces, failed = {}, {}, {}, {}
    for spec in blocks:
        start = time.perf_counter()
        graph = dt.TaskGraph(f"bench_{spec}")
        options = {"num_warps": warps, "outline": not inline}  # None: the tiles' own
        if stages is not None:
            options["num_stages"] = stages
        error = None
        try:
            stack = add_tp_mlp_stack(graph, x0, weights, blocks=MlpBlocks.parse(spec))
            mk = graph.compile(programs=programs, **options)
            mk()  # compiles; Triton refuses here what does not fit the GPU
            if dev.type == "cuda":
                torch.cuda.synchronize(dev)
        except Exception as exc:  # noqa: BLE001 - the config drops out, the others run
            error = f"{type(exc).__name__}: {exc}".splitlines()[0][:200]
        if not all_ok(error is None):  # on every rank alike
            failed[spec] = error or "failed on another rank"
            continue
        build[spec] = time.perf_counter() - start  # graph, schedule, codegen, Triton compile
        errors[spec] = worst(float((stack.out.float() - ref).abs().max() / ref.abs().max()))
        cands[f"megakernel_{spec}"] = mk
        if trace_prefix:  # the same graph traced: a second call after the one that compiles
            traced = graph.compile(programs=programs, trace=True, **options)
            traced()
            trace.clear()
            traced()
            traces[spec] = trace.events()[-1]["args"]["tasks"]
            trace.write(trace.events(), f"{trace_prefix}_{spec}_rank{w.rank}")
        if dev.type == "cuda":  # the same launch replayed from a CUDA graph
            captured = torch.cuda.CUDAGraph()
            with torch.cuda.graph(captured):
                mk()
            cands[f"megakernel_graph_{spec}"] = captured.replay
    if W == 1 and dev.type == "cuda":
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            torch_mlp()
        torch.cuda.current_stream().wait_stream(stream)
        graph_ = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph_):
            torch_mlp()
        cands["torch_graph"] = graph_.replay
    row = {"tokens": tokens, "hidden": hidden, "ffn": ffn, "layers": layers, "world_size": W,
           "weights": layout, "dtype": str(dtype), "device": torch.cuda.get_device_name(dev)
           if dev.type == "cuda" else "cpu", "max_rel_error": errors,
           "build_s": build, "trace": traces, "tuned": tuned, "failed": failed}
    for batch in (1, 8):
        samples = time_in_rounds(cands, rounds, iters, warmup, dev, batch)
        row[f"batch{batch}"] = {name: agreed_median(t) for name, t in samples.items()}
    if dev.type == "cuda":
        row["kernels"] = {name: agreed_median([kernel_time(fn, 2, 10)])
                          for name, fn in cands.items()}
        row["host"] = {name: agreed_median([_host_time(fn, dev)]) for name, fn in cands.items()}
    return row


def _host_time(fn, dev, calls: int = 20) -> float:
    """The host's time per call (us) while the GPU runs behind: the launch cost alone."""
    torch.cuda.synchronize(dev)
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    took = time.perf_counter() - start
    torch.cuda.synchronize(dev)
    return took * 1e6 / calls


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="ditron bench megakernel",
                                description=__doc__.split("\n\n")[0])
    p.add_argument("--world-size", type=positive_int, default=1,
                   help="ranks to launch (default %(default)s)")
    p.add_argument("--shape", default="16,4096,11008", type=int_list(("tokens", "hidden", "ffn")),
                   help="tokens,hidden,ffn (global; default %(default)s)")
    p.add_argument("--layers", type=positive_int, default=4,
                   help="MLP layers in the stack (default %(default)s)")
    p.add_argument("--blocks",
                   help="comma-separated MlpBlocks labels, "
                        "BMxBNxBKxRN[xSPLIT][sSTAGES][wWARPS][t0|t1][dDOWN_N] (sSTAGES: the "
                        "GEMM loops' pipeline depth, wWARPS: the num_warps the tiles want, "
                        "t1/t0: TMA descriptor loads on/off, dDOWN_N: the down tiles' "
                        "columns when not BN; default: add_tp_mlp's untuned choice for the "
                        "tokens)")
    p.add_argument("--stages", type=positive_int,
                   help="num_stages of the whole megakernel (Triton's default)")
    p.add_argument("--programs", type=positive_int,
                   help="programs per rank (ditron.task's default)")
    p.add_argument("--warps", type=int, choices=WARPS,
                   help="num_warps of the megakernel (default: the most its tiles want, 4 "
                        "unless a label says wWARPS)")
    p.add_argument("--inline", action="store_true",
                   help="inline the tile functions into the item loop (compile(outline=False))")
    p.add_argument("--weights", choices=("linear", "kn"), default="linear",
                   help="how the weights are stored: 'linear' as nn.Linear keeps them "
                        "([out, in], used transposed), 'kn' as [in, out] (default %(default)s)")
    p.add_argument("--tune", action="store_true",
                   help="run the MLP tuner first (tune_mlp, with --warmup and --iters) and time "
                        "its choice too")
    add_timing_options(p, 5, 40, rounds=4)
    p.add_argument("--smoke", action="store_true",
                   help="CPU backend, tiny shapes, timed with --warmup 1 --iters 2 --rounds 1 "
                        "unless given")
    p.add_argument("--out", type=output_file, help="write the result row as JSON here")
    p.add_argument("--trace", metavar="PREFIX", type=output_file,
                   help="also run each config traced (ditron.trace) and write "
                        "PREFIX_<config>_rank<r>.json / .png; print where each task's time went")
    args = p.parse_args(argv)
    backend = "cpu" if args.smoke else "cuda"
    if backend == "cuda" and not torch.cuda.is_available():  # before any rank starts
        p.error("no CUDA device is visible: it times GPUs (--smoke runs tiny shapes on the "
                "CPU backend)")
    if args.smoke:
        smoke_defaults(p, argv, args, {"shape": [4, 32, 16 * args.world_size], "layers": 2},
                       {"warmup": 1, "iters": 2, "rounds": 1})
    tokens, hidden, ffn = args.shape
    try:
        blocks = ([MlpBlocks.parse(b).label() for b in args.blocks.split(",")] if args.blocks
                  else ["16x16x16x32x2"] if args.smoke else [default_blocks(tokens).label()])
    except ValueError as exc:
        p.error(str(exc))
    if ffn % args.world_size:
        p.error(f"ffn must divide by the world size {args.world_size}")
    row = ditron.launch(_measure, args.world_size, tokens, hidden, ffn, args.layers, blocks,
                        args.warmup, args.iters, args.rounds, args.stages, args.programs,
                        args.trace, args.warps, args.inline, args.weights, args.tune,
                        backend=backend)[0]
    print(f"{args.layers} layers: tokens {tokens}, hidden {hidden}, ffn {ffn}, "
          f"W = {args.world_size}, bf16, {args.weights} weights, "
          f"num_warps {args.warps or 'from the tiles'}, "
          f"num_stages {args.stages}, programs {args.programs}, "
          f"tiles {'inlined' if args.inline else 'out of line'}; "
          f"us per call (slower rank's median)")
    if row["tuned"]:
        print(f"  tuner chose {row['tuned']['blocks']} in {row['tuned']['tune_s']:.1f} s")
    for spec, error in row["failed"].items():
        print(f"  megakernel_{spec}: not timed, its build failed: {error}")
    for batch in ("batch1", "batch8", "kernels", "host"):
        if batch not in row:
            continue
        base = row[batch]["torch"]
        for name, t in row[batch].items():
            spec = name.removeprefix("megakernel_")
            err = row["max_rel_error"].get(spec)
            note = (f"   max rel error vs torch {err:.2e}, built in {row['build_s'][spec]:.1f} s"
                    if err is not None else "")
            print(f"  {batch:8s} {name:34s} {t:10.1f}   torch / this {base / t:6.3f}{note}")
    for spec, tasks in row["trace"].items():
        print(f"  traced call of {spec} (rank 0; us from the launch; waits summed over tiles):")
        for name, t in tasks.items():
            print(f"    {name:16s} {t['tiles']:5d} tiles  {t['first_start_us']:8.1f} - "
                  f"{t['last_end_us']:8.1f}   waits {t['wait_us_total']:9.1f}   tile mean "
                  f"{t['tile_us_mean']:7.2f}")
    if args.out:
        meta = provenance("megakernel", argv, backend, **vars(args))
        write_json(args.out, dict(row, meta=meta))
    return 0

