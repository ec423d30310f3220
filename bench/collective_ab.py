"""A/B timing of one collective under different settings, with torch.distributed's in the
same processes.

    python3 bench/collective_ab.py --op reduce_scatter --engine copy_engine --sizes 256M,1G \\
        --variant even:DITRON_CHUNK_TAPER=1 --variant tapered:DITRON_CHUNK_TAPER=3

A variant is ``NAME:SETTING[,SETTING...]``; a setting is ``ENV_VAR=value`` (an environment
variable, names in upper case) or ``module.attr=value`` (an attribute of an importable
module, the value a Python literal), e.g. ``ditron.ops.chunked_exchanges.PULL_LANES=1``. Settings
are applied before every call of their variant (and before its CUDA graph is captured), so
they must be read at call time. Each variant is checked against torch's result first.

Timing: batches of ``--calls`` calls eagerly and, on GPU, CUDA graphs of ``--calls`` calls
(the Ditron variants warmed up inside ``ditron.ops.graph_safe()``), in ``--rounds`` rounds
whose order rotates (``tune.tuner.rotations``), a host barrier before every sample; the
slower rank's median, us per call. ``size`` is the whole tensor (all-gather: the output,
reduce-scatter and all-reduce: the input). The torch reference is NCCL on GPU; on the CPU
backend (a smoke run) there is none for all-gather / reduce-scatter.
"""

from __future__ import annotations

import argparse
import ast
import importlib
import json
import os
import statistics
import time

import torch
import torch.distributed as dist

import ditron
from ditron.runtime.config import parse_bytes
from ditron.runtime.torch_dist import all_gather_single, reduce_scatter_single
from ditron.runtime.world import current
from ditron.tune.tuner import rotations

OPS = ("all_gather", "reduce_scatter", "all_reduce")


def parse_variant(spec: str) -> tuple[str, list[tuple[str, str]]]:
    """``"name:A=1,b.c=2"`` -> ``("name", [("A", "1"), ("b.c", "2")])``."""
    name, sep, rest = spec.partition(":")
    if not sep or not name:
        raise ValueError(f"a variant is NAME:SETTING[,SETTING...], got {spec!r}")
    settings = []
    for item in filter(None, rest.split(",")):
        key, eq, value = item.partition("=")
        if not eq or not key:
            raise ValueError(f"a setting is KEY=value, got {item!r} in {spec!r}")
        settings.append((key, value))
    return name, settings


def apply(settings: list[tuple[str, str]]) -> None:
    for key, value in settings:
        if "." not in key:
            os.environ[key] = value
            continue
        module, attr = key.rsplit(".", 1)
        mod = importlib.import_module(module)
        if not hasattr(mod, attr):
            raise ValueError(f"{module} has no attribute {attr!r}")
        setattr(mod, attr, ast.literal_eval(value))


def _ops(op: str, nbytes: int, engine: str | None, dtype: torch.dtype):
    """``(ditron_call, torch_call or None, torch_out, x)`` for ``op`` on ``nbytes``: this
    rank's input ``x`` (fresh random data) and what torch's call writes into."""
    w = ditron.world()
    n = nbytes // torch.tensor([], dtype=dtype).element_size()
    n -= n % w.world_size
    gen = torch.Generator().manual_seed(w.rank)
    if op == "all_gather":
        x = torch.randn(n // w.world_size, generator=gen).to(w.device, dtype)
        out = torch.empty(n, device=w.device, dtype=dtype)
        mine = lambda: ditron.ops.all_gather(x, engine=engine)  # noqa: E731
        theirs = (lambda: all_gather_single(out, x)) if w.device.type == "cuda" \
            else None
    elif op == "reduce_scatter":
        x = torch.randn(n, generator=gen).to(w.device, dtype)
        out = torch.empty(n // w.world_size, device=w.device, dtype=dtype)
        mine = lambda: ditron.ops.reduce_scatter(x, engine=engine)  # noqa: E731
        theirs = (lambda: reduce_scatter_single(out, x)) if w.device.type == "cuda" \
            else None
    else:
        x = torch.randn(n, generator=gen).to(w.device, dtype)
        out = torch.empty_like(x)
        mine = lambda: ditron.ops.all_reduce(x, engine=engine)  # noqa: E731

        def theirs():
            out.copy_(x)
            dist.all_reduce(out, group=None if w.device.type == "cuda" else current().host_group)
    return mine, theirs, out, x


def _reference(op: str, x: torch.Tensor) -> torch.Tensor:
    """The op's result from fp32 parts gathered on the host group."""
    w = ditron.world()
    parts = [torch.empty_like(x, device="cpu", dtype=torch.float32) for _ in range(w.world_size)]
    dist.all_gather(parts, x.float().cpu(), group=current().host_group)
    if op == "all_gather":
        return torch.cat(parts)
    total = torch.stack(parts).sum(0)
    return total.chunk(w.world_size)[w.rank] if op == "reduce_scatter" else total


def _timed(fns: dict, rounds: int, calls: int, graph: bool) -> dict[str, float]:
    cuda = ditron.world().device.type == "cuda"
    samples: dict[str, list[float]] = {k: [] for k in fns}
    for order in rotations(list(fns), rounds):
        for name in order:
            dist.barrier(group=current().host_group)
            if not cuda:
                t0 = time.perf_counter()
                for _ in range(calls):
                    fns[name]()
                samples[name].append((time.perf_counter() - t0) * 1e6 / calls)
                continue
            torch.cuda.synchronize()
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            s.record()
            if graph:
                fns[name].replay()
            else:
                for _ in range(calls):
                    fns[name]()
            e.record()
            e.synchronize()
            samples[name].append(s.elapsed_time(e) * 1e3 / calls)
    med = torch.tensor([statistics.median(samples[k]) for k in fns], dtype=torch.float64)
    dist.all_reduce(med, op=dist.ReduceOp.MAX, group=current().host_group)
    return {k: round(v, 1) for k, v in zip(fns, med.tolist(), strict=True)}


def case(op: str, nbytes: int, engine: str | None, variants: list, calls: int,
         rounds: int, dtype: str) -> dict:
    from ditron.ops.graphs import capture

    dt = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}[dtype]
    mine, theirs, _, x = _ops(op, nbytes, engine, dt)
    ref = _reference(op, x)
    fns = {}
    for name, settings in variants:
        def call(settings=settings):
            apply(settings)
            return mine()
        got = call().float().cpu()
        err = (got - ref).abs().max().item() / max(ref.abs().max().item(), 1e-6)
        if err > (1e-5 if dt == torch.float32 else 2e-2):
            raise AssertionError(f"{op} variant {name!r}: relative error {err:.3g} against torch")
        fns[name] = call
    if theirs is not None:
        fns["torch"] = theirs
    res = {"eager": _timed(fns, rounds, calls, graph=False)}
    if ditron.world().device.type == "cuda":
        graphs = {k: capture(fn, calls, safe_warm_up=k != "torch") for k, fn in fns.items()}
        res["graph"] = _timed(graphs, rounds, calls, graph=True)
    return res


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--op", choices=OPS, required=True)
    p.add_argument("--engine", default=None, help="forced engine (default: the op's choice)")
    p.add_argument("--sizes", default="64M,256M,1G")
    p.add_argument("--variant", action="append", required=True, dest="variants",
                   help="NAME:SETTING[,SETTING...] (repeat)")
    p.add_argument("--world-size", type=int, default=2)
    p.add_argument("--backend", choices=("cpu", "cuda"), default=None)
    p.add_argument("--dtype", choices=("bf16", "fp16", "fp32"), default="bf16")
    p.add_argument("--calls", type=int, default=10)
    p.add_argument("--rounds", type=int, default=6)
    p.add_argument("--out", default=None, help="JSON file for the results")
    args = p.parse_args()
    variants = [parse_variant(v) for v in args.variants]
    if len({name for name, _ in variants}) != len(variants) or "torch" in dict(variants):
        raise SystemExit("variant names must be distinct and not 'torch'")
    backend = args.backend or ("cuda" if torch.cuda.is_available() else "cpu")
    sizes = [parse_bytes(s) for s in args.sizes.split(",")]
    if "DITRON_HEAP_SIZE" not in os.environ:  # inboxes of two halves, as `ditron bench`
        os.environ["DITRON_HEAP_SIZE"] = str(3 * args.world_size * max(sizes) + (1 << 30))
    results = {}
    for size, nbytes in zip(args.sizes.split(","), sizes, strict=True):
        r = ditron.launch(case, args.world_size, args.op, nbytes, args.engine, variants,
                          args.calls, args.rounds, args.dtype, backend=backend)[0]
        results[str(nbytes)] = r
        for mode, t in r.items():
            base = t.get("torch")
            print(f"{args.op} {size:>6} {mode:5s} " + "  ".join(
                f"{k} {v:.1f}" + (f" ({base / v:.2f}x)" if base and k != "torch" else "")
                for k, v in t.items()), flush=True)
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"op": args.op, "engine": args.engine, "variants": args.variants,
                       "world_size": args.world_size, "backend": backend,
                       "dtype": args.dtype, "results": results}, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
