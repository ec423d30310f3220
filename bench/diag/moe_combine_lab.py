"""The differentiable MoE combine (``ditron.nn.moe.moe_combine``) against the formulation it
replaced in session 48, one rank, same run.

New: the ``ditron::moe_combine`` op (the rows read in place by one weighted gather-sum;
its backward sends ``g``'s rows to the experts, weighted as they move, and reads the
copies again in place for ``dw``: ``moe_send_tokens``, ``moe_copy_dots``).
Old: ``ditron::moe_return_copies`` (the copies as fp32 ``[T, k, H]``), times the weights,
summed in torch (autograd keeps the fp32 copies for ``dw``). Times forward and forward +
backward (CUDA events, medians of fixed counts), the memory a forward call leaves held for
its backward, and the largest difference between the two's outputs and gradients; then
the ops under the new one alone (``ditron.ops.moe``: the combine and the two halves of its
backward), without autograd around them.

    python bench/diag/moe_combine_lab.py [--tokens 1024,8192] [--out F]
"""

from __future__ import annotations

import argparse
import functools
import json
import statistics

import torch

import ditron


def _old(y, wts, routing, sizes, key):
    copies = torch.ops.ditron.moe_return_copies(y, routing, sizes, key)
    return (copies * wts.float()[:, :, None]).sum(1).to(y.dtype)


def _step(fwd, leaves, grad) -> None:
    for t in leaves:
        t.grad = None
    fwd().backward(grad)


def _held(fwd, dev) -> tuple[torch.Tensor, float]:
    """``fwd()`` and the MB it leaves allocated (its output and what autograd keeps)."""
    if dev.type != "cuda":
        return fwd(), float("nan")
    torch.cuda.synchronize()
    before = torch.cuda.memory_allocated()
    out = fwd()
    torch.cuda.synchronize()
    return out, (torch.cuda.memory_allocated() - before) / 2**20


def _measure(args) -> list[dict]:
    from ditron.nn import library
    from ditron.nn import moe as nn_moe
    from ditron.ops import moe as ops_moe
    from ditron.tune.tuner import time_calls

    dev = ditron.world().device
    rows = []
    for tokens in args.tokens:
        g = torch.Generator(device=dev).manual_seed(tokens)
        x = torch.randn(tokens, args.hidden, device=dev, dtype=torch.bfloat16, generator=g)
        ids = torch.randint(0, args.experts, (tokens, args.topk), device=dev, generator=g)
        wts = torch.rand(tokens, args.topk, device=dev, generator=g).requires_grad_()
        d = ditron.ops.moe_dispatch(x, ids, args.experts)
        y = torch.randn_like(d.x).requires_grad_()
        grad = torch.randn_like(x)
        routing, sizes = library.routing_of(d)
        key = library.world_key()
        ways = {"new": functools.partial(nn_moe.moe_combine, y, d, wts),
                "old": functools.partial(_old, y, wts, routing, sizes, key)}
        row = {"tokens": tokens, "hidden": args.hidden, "topk": args.topk}
        results = {}
        for name, fwd in ways.items():
            with torch.no_grad():
                row[f"{name}_fwd"] = statistics.median(
                    time_calls(fwd, args.warmup, args.iters, dev, batch=2))
            step = functools.partial(_step, fwd, (y, wts), grad)
            row[f"{name}_fwd_bwd"] = statistics.median(
                time_calls(step, args.warmup, args.iters, dev))
            out, row[f"{name}_held_MB"] = _held(fwd, dev)
            y.grad = wts.grad = None
            out.backward(grad)
            results[name] = (out.detach().float(), y.grad.float(), wts.grad.float())
            del out
        row["max_diff"] = [float((a - b).abs().max()) for a, b in
                           zip(results["new"], results["old"], strict=True)]
        parts = {"combine": functools.partial(ops_moe.combine_copies, y, d, wts),
                 "send_tokens": functools.partial(ops_moe.send_tokens, grad, d, wts),
                 "copy_dots": functools.partial(ops_moe.copy_dots, y, d, grad)}
        with torch.no_grad():
            for name, call in parts.items():
                row[f"op_{name}"] = statistics.median(
                    time_calls(call, args.warmup, args.iters, dev, batch=2))
        rows.append(row)
        print(f"T {tokens:5d}  forward new {row['new_fwd']:8.1f} old {row['old_fwd']:8.1f} us"
              f"  fwd+bwd new {row['new_fwd_bwd']:8.1f} old {row['old_fwd_bwd']:8.1f} us"
              f"  held new {row['new_held_MB']:7.1f} old {row['old_held_MB']:7.1f} MB"
              f"  max diff out/dy/dw {row['max_diff']}", flush=True)
        print("  ops alone (us): " + "  ".join(f"{n} {row['op_' + n]:.1f}" for n in parts),
              flush=True)
    return rows


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--tokens", default="1024,8192")
    p.add_argument("--hidden", type=int, default=7168)
    p.add_argument("--experts", type=int, default=64)
    p.add_argument("--topk", type=int, default=8)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--iters", type=int, default=10)
    p.add_argument("--out")
    p.add_argument("--smoke", action="store_true", help="CPU backend, tiny shapes")
    args = p.parse_args()
    args.tokens = [int(t) for t in args.tokens.split(",")]
    if args.smoke:
        args.tokens, args.hidden, args.experts, args.topk = [6], 40, 4, 2
        args.warmup, args.iters = 1, 2
    rows = ditron.launch(_measure, 1, args, backend="cpu" if args.smoke else "cuda")[0]
    if args.out:
        with open(args.out, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
