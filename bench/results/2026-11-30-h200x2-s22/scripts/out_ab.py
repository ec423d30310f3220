"""Eager A/B on 2 GPUs into preallocated outputs: NCCL, the copy engine's raw eager path
(replays off), its replayed graphs (ops/replays.py), the fused SM kernel replayed and not,
and for the all-gather a symmetric out (direct pushes); busy / device us per call as in session 21's
gather_ab.py; every variant checked against NCCL's result first."""

from __future__ import annotations

import statistics
import sys

import torch
import torch.distributed as dist

import ditron

CALLS = 20
CYC = 1980
ROUNDS = 4


def batch(fn, group, head: bool) -> list[float]:
    torch.cuda.synchronize()
    dist.barrier(group=group)
    if head:
        torch.cuda._sleep(int(20 * 1000 * CYC))
    ev = [torch.cuda.Event(enable_timing=True) for _ in range(CALLS + 1)]
    ev[0].record()
    for i in range(CALLS):
        fn()
        ev[i + 1].record()
    ev[-1].synchronize()
    return [a.elapsed_time(b) * 1e3 for a, b in zip(ev, ev[1:], strict=False)]


def body(sizes):
    from ditron.ops import replays
    from ditron.runtime.world import current

    w = ditron.world()
    group = current().host_group
    lines = []
    for nbytes in sizes:
        for op in ("all_gather", "reduce_scatter"):
            n_in = nbytes // 2 // (w.world_size if op == "all_gather" else 1)
            n_out = n_in * w.world_size if op == "all_gather" else n_in // w.world_size
            x = torch.randn(n_in, device=w.device).bfloat16()
            out = torch.empty(n_out, dtype=x.dtype, device=w.device)
            mine = torch.empty_like(out)
            if op == "all_gather":
                nccl = lambda out=out, x=x: dist.all_gather_into_tensor(out, x)  # noqa: E731
            else:
                nccl = lambda out=out, x=x: dist.reduce_scatter_tensor(out, x)  # noqa: E731
            nccl()
            ref = out.clone()
            f = getattr(ditron.ops, op)

            def call(engine, replay, o, f=f, x=x):
                replays.ENABLED = replay
                return f(x, engine=engine, out=o)

            fns = {"nccl": nccl,
                   "raw": lambda m=mine: call("copy_engine", False, m),
                   "replay": lambda m=mine: call("copy_engine", True, m),
                   "sm": lambda m=mine: call("sm", True, m),
                   "smraw": lambda m=mine: call("sm", False, m)}
            sym = None
            if op == "all_gather":
                sym = ditron.empty((n_out,), x.dtype)
                fns["sym"] = lambda s=sym: call("copy_engine", True, s)
            for name, fn in list(fns.items())[1:]:
                (sym if name == "sym" else mine).fill_(float("nan"))
                got = fn()
                err = (got.float() - ref.float()).abs().max().item()
                ok = torch.equal(got, ref) if op == "all_gather" else err < 0.05
                lines.append(f"check rank {w.rank} {op} {nbytes >> 20}M {name}: "
                             f"{'ok' if ok else 'MISMATCH'} (max err {err:.3g})")
            busy = {k: [] for k in fns}
            dev = {k: [] for k in fns}
            names = list(fns)
            for r in range(ROUNDS):
                order = names[r % len(names):] + names[:r % len(names)]
                for k in order:
                    for _ in range(2):
                        fns[k]()
                    busy[k] += batch(fns[k], group, False)
                    dev[k] += batch(fns[k], group, True)
            med = torch.tensor([[statistics.median(busy[k]), statistics.median(dev[k])]
                                for k in names], dtype=torch.float64)
            dist.all_reduce(med, op=dist.ReduceOp.MAX, group=group)
            base = med[0].tolist()
            row = [f"{op:14s} {nbytes >> 20:5d}M  nccl {base[0]:6.1f}/{base[1]:6.1f}"]
            for k, (b, d) in zip(names[1:], med[1:].tolist(), strict=True):
                row.append(f"{k} {b:6.1f}/{d:6.1f} ({base[0] / b:.2f}x)")
            lines.append("  ".join(row))
            torch.cuda.synchronize()
            if sym is not None:
                ditron.free(sym)
    replays.ENABLED = True
    return lines


if __name__ == "__main__":
    sizes = [int(s) << 20 for s in sys.argv[1].split(",")]
    out = ditron.launch(body, 2, sizes, backend="cuda")
    print("\n".join(ln for ln in out[1] if ln.startswith("check")))
    print("\n".join(out[0]))
