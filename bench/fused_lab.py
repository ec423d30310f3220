"""Variants of the fused collectives under CUDA graphs, against NCCL and PyTorch's
symmetric-memory all-reduce, in one run (the method of ``ditron bench collectives --graphs``:
``--calls`` calls captured per graph, fixed replay counts on every rank, CUDA-event medians).

Variants: pull / push (``DITRON_FUSED_PUSH``) x block (``DITRON_FUSED_BLOCK``) x programs
(``DITRON_FUSED_PROGRAMS``, 0: the default) x warps (``DITRON_FUSED_WARPS``, 0: the default);
"default" is what the ops pick by themselves. One table row per op, size and implementation.

    python bench/fused_lab.py [--world-size 2] [--sizes 256K,1M,4M,16M] [--out DIR]
        [--variants push:4096:256:8,pull:8192:0:0]
"""

from __future__ import annotations

import argparse
import json
import os
import sys

import torch

import ditron
from ditron.runtime.torch_dist import all_gather_single, reduce_scatter_single

VARIANTS = "default,pull:1024,pull:4096,push:1024,push:2048,push:4096"
_KNOBS = ("DITRON_FUSED_PUSH", "DITRON_FUSED_BLOCK", "DITRON_FUSED_PROGRAMS",
          "DITRON_FUSED_WARPS")


def _parse_variants(spec: str) -> list[tuple[str, tuple[str, ...]]]:
    """``(label, env values for _KNOBS)`` per ``kind[:block[:programs[:warps]]]`` item."""
    out = []
    for item in spec.split(","):
        kind, *rest = item.split(":")
        if kind == "default":
            out.append(("default", ("", "", "", "")))
            continue
        if kind not in ("push", "pull") or len(rest) > 3:
            raise SystemExit(f"fused_lab: bad variant {item!r}")
        vals = [v if v != "0" else "" for v in rest] + [""] * (3 - len(rest))
        out.append((item, ("1" if kind == "push" else "0", *vals)))
    return out


def _impls(op: str, x: torch.Tensor, part: torch.Tensor, variants) -> list:
    """(label, callable) per implementation of ``op`` on ``x`` (all-gather: on ``part``)."""
    import torch.distributed as dist

    from ditron.benchmarks.collectives import _symm_mem_input

    def variant(values: tuple[str, ...]):
        def call():
            os.environ.update(zip(_KNOBS, values, strict=True))
            if op == "all_gather":
                return ditron.ops.all_gather(part, engine="sm")
            if op == "reduce_scatter":
                return ditron.ops.reduce_scatter(x, engine="sm")
            return ditron.ops.all_reduce(x, op.removeprefix("all_reduce/"), engine="sm")
        return call

    impls = [(label, variant(values)) for label, values in variants]
    if dist.get_backend() == "nccl":
        if op == "all_gather":
            dst = torch.empty_like(x)
            impls.append(("nccl", lambda: all_gather_single(dst, part)))
        elif op == "reduce_scatter":
            out = torch.empty_like(part)
            impls.append(("nccl", lambda: reduce_scatter_single(out, x)))
        elif op == "all_reduce/one_shot":
            buf = x.clone()
            impls.append(("nccl", lambda: dist.all_reduce(buf)))
    symm = _symm_mem_input(x) if op.startswith("all_reduce") else None
    if symm is not None:
        t, name = symm
        if op.endswith("one_shot"):
            impls.append(("symm_mem one_shot",
                          lambda: torch.ops.symm_mem.one_shot_all_reduce(t, "sum", name)))
        else:
            impls.append(("symm_mem two_shot",
                          lambda: torch.ops.symm_mem.two_shot_all_reduce_(t, "sum", name)))
    return impls


def _run(sizes: list[int], ops: list[str], calls: int, variants) -> list[dict]:
    from ditron.benchmarks.collectives import _replay_each
    from ditron.ops.workspaces import release_workspaces

    w = ditron.world()
    rows = []
    for op in ops:
        for size in sizes:
            numel = max(size // 2 // w.world_size, 1) * w.world_size
            x = torch.randn(numel, device=w.device).to(torch.bfloat16)
            part = x[: numel // w.world_size].clone()
            for label, t in _replay_each(_impls(op, x, part, variants), calls, 4, 20):
                rows.append(dict(op=op, bytes=numel * 2, impl=label, us=t * 1e6))
                if w.rank == 0:
                    gbps = numel * 2 / w.world_size * (w.world_size - 1) / t / 1e9
                    print(f"{op:<20}{numel * 2:>12}  {label:<24}{t * 1e6:9.1f} us "
                          f"{gbps:7.1f} GB/s", flush=True)
            for knob in _KNOBS:
                os.environ.pop(knob, None)
            release_workspaces()
    return rows


def main() -> int:
    from ditron.runtime.config import parse_bytes

    p = argparse.ArgumentParser()
    p.add_argument("--world-size", type=int, default=None)
    p.add_argument("--sizes", default="256K,1M,4M,16M")
    p.add_argument("--ops", default="all_reduce/one_shot,all_reduce/two_shot,all_gather,"
                                    "reduce_scatter")
    p.add_argument("--calls", type=int, default=50)
    p.add_argument("--out", default="bench/results/fused_lab")
    p.add_argument("--variants", default=VARIANTS,
                   help="comma list of default or push|pull[:block[:programs[:warps]]]")
    args = p.parse_args()
    W = args.world_size or max(2, torch.cuda.device_count())
    sizes = [parse_bytes(s) for s in args.sizes.split(",")]
    rows = ditron.launch(_run, W, sizes, args.ops.split(","), args.calls,
                         _parse_variants(args.variants), backend="cuda")[0]
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "fused_lab.json"), "w") as f:
        json.dump(dict(world_size=W, device=torch.cuda.get_device_name(), calls=args.calls,
                       rows=rows), f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
