"""The device all-to-all's row copies (``ditron.ops.a2a_device``) under tile variants, one rank.

An MoE dispatch moves ``T * k`` rows of ``H``; at W = 1 they are all the rank's own rows,
which the finishing kernel reads straight from ``x`` (one pass; before session 47 two,
through the inbox). This times ``all_to_all_device`` with the dispatch's gathers
(``send_index``: each copy's token, sorted by expert; ``recv_index``: the identity a
dispatch at W = 1 passes), then ``moe_dispatch`` and ``moe_combine`` whole, per variant of
the copy tiles, against ``torch.index_select`` (the same gather in one pass) and a plain
``copy_`` of the rows (a pass's bandwidth bound). Fixed counts, CUDA-event medians.

Variants ``bytes:cols:senders:finish_per_sm:warps`` (``0``: the module's default).

    python bench/diag/a2a_copy_lab.py [--tokens 8192,1024] [--variants ...] [--out F]
"""

from __future__ import annotations

import argparse
import functools
import json
import statistics

import torch

import ditron

VARIANTS = ("0:0:0:0:0,16384:1024:256:2:4,16384:1024:512:4:4,32768:1024:256:2:8,"
            "8192:1024:256:4:4,16384:2048:256:2:8,65536:1024:128:1:8")


def _apply(variant: str, defaults: dict) -> None:
    from ditron.ops import a2a_device as a2a

    tb, tc, senders, per_sm, warps = (int(v) for v in variant.split(":"))
    a2a.TILE_BYTES["cuda"] = tb or defaults["bytes"]
    a2a.TILE_COLS["cuda"] = tc or defaults["cols"]
    a2a.GPU_SENDERS = senders or defaults["senders"]
    a2a.FINISH_PER_SM = per_sm or defaults["per_sm"]
    a2a.COPY_WARPS = warps or defaults["warps"]


def _measure(args) -> list[dict]:
    from ditron.ops import a2a_device as a2a

    defaults = {"bytes": a2a.TILE_BYTES["cuda"], "cols": a2a.TILE_COLS["cuda"],
                "senders": a2a.GPU_SENDERS, "per_sm": a2a.FINISH_PER_SM,
                "warps": a2a.COPY_WARPS}
    rows = []
    for ci, tokens in enumerate(args.tokens):
        rows += _case(args, tokens, ci * 64, defaults)
    return rows


def _case(args, tokens: int, cap_shift: int, defaults: dict) -> list[dict]:
    """The rows of one token count: the baselines, then each variant."""
    from ditron.tune.tuner import time_calls

    dev = ditron.world().device

    def med(fn, *a, **kw) -> float:
        return statistics.median(time_calls(functools.partial(fn, *a, **kw), args.warmup,
                                            args.iters, dev, batch=4))

    g = torch.Generator(device=dev).manual_seed(tokens)
    x = torch.randn(tokens, args.hidden, device=dev, dtype=torch.bfloat16, generator=g)
    ids = torch.randint(0, args.experts, (tokens, args.topk), device=dev, generator=g)
    weights = torch.rand(tokens, args.topk, device=dev, generator=g)
    n = tokens * args.topk
    send_index = torch.sort(ids.reshape(-1), stable=True).indices // args.topk
    splits = torch.tensor([n], device=dev)
    big = torch.empty(n, args.hidden, device=dev, dtype=torch.bfloat16)
    pass_bytes = 2 * n * args.hidden * 2  # one pass reads and writes the rows
    ref = x.index_select(0, send_index)
    base = {"tokens": tokens, "rows": n, "hidden": args.hidden,
            "torch_index_select": med(x.index_select, 0, send_index),
            "copy": med(big.copy_, ref)}
    rows = []
    for vi, variant in enumerate(args.variants):
        _apply(variant, defaults)
        cap = n + 1 + vi + cap_shift  # a workspace of its own (the senders count differs)
        out, _ = ditron.ops.all_to_all_device(x, splits, cap, send_index=send_index)
        assert torch.equal(out[:n], ref), variant
        recv = torch.arange(cap, device=dev)
        d = ditron.ops.moe_dispatch(x, ids, args.experts)
        row = dict(base, variant=variant,
                   a2a=med(ditron.ops.all_to_all_device, x, splits, cap,
                           send_index=send_index, recv_index=recv),
                   dispatch=med(ditron.ops.moe_dispatch, x, ids, args.experts),
                   combine=med(ditron.ops.moe_combine, d.x, d, weights))
        row["a2a_GBps"] = pass_bytes / row["a2a"] / 1e3  # as if one pass over the rows
        row["copy_GBps"] = pass_bytes / row["copy"] / 1e3
        rows.append(row)
        del d
        ditron.ops.collectives.release_workspaces()  # each variant's inbox is ~2 GB of the heap
        print(f"T {tokens:5d} rows {n:6d} {variant:24s} a2a {row['a2a']:8.1f} us "
              f"({row['a2a_GBps']:6.0f} GB/s as one pass)  dispatch {row['dispatch']:8.1f}"
              f"  combine {row['combine']:8.1f}  | index_select "
              f"{row['torch_index_select']:8.1f}  copy {row['copy']:8.1f} "
              f"({row['copy_GBps']:5.0f} GB/s)", flush=True)
    _apply("0:0:0:0:0", defaults)
    return rows


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--tokens", default="8192,1024")
    p.add_argument("--hidden", type=int, default=7168)
    p.add_argument("--experts", type=int, default=64)
    p.add_argument("--topk", type=int, default=8)
    p.add_argument("--variants", default=VARIANTS)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--iters", type=int, default=15)
    p.add_argument("--out")
    p.add_argument("--smoke", action="store_true", help="CPU backend, tiny shapes")
    args = p.parse_args()
    args.tokens = [int(t) for t in args.tokens.split(",")]
    args.variants = args.variants.split(",")
    if args.smoke:
        args.tokens, args.hidden, args.experts, args.topk = [6], 40, 4, 2
        args.variants, args.warmup, args.iters = args.variants[:2], 1, 2
    rows = ditron.launch(_measure, 1, args, backend="cpu" if args.smoke else "cuda")[0]
    if args.out:
        with open(args.out, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
