"""Eager A/B on 2 GPUs: NCCL (preallocated out), the eager copy engine, and the copy
engine's graph-safe call captured once and replayed per call (graphs of 1 and 2 calls), busy
/ device us per call as in gather_ab.py; results checked against NCCL's."""

from __future__ import annotations

import statistics
import sys

import torch
import torch.distributed as dist

import ditron

CALLS = 20
CYC = 1980
ROUNDS = 4


def batch(fn, group, head: bool, per: int = 1) -> list[float]:
    torch.cuda.synchronize()
    dist.barrier(group=group)
    if head:
        torch.cuda._sleep(int(20 * 1000 * CYC))
    n = CALLS // per
    ev = [torch.cuda.Event(enable_timing=True) for _ in range(n + 1)]
    ev[0].record()
    for i in range(n):
        fn()
        ev[i + 1].record()
    ev[-1].synchronize()
    return [a.elapsed_time(b) * 1e3 / per for a, b in zip(ev, ev[1:], strict=False)]


def body(sizes):
    from ditron.runtime.world import current

    w = ditron.world()
    group = current().host_group
    lines = []
    for nbytes in sizes:
        for op in ("all_gather", "reduce_scatter"):
            n_in = nbytes // 2 // (w.world_size if op == "all_gather" else 1)
            x = torch.randn(n_in, device=w.device).bfloat16()
            if op == "all_gather":
                out = torch.empty(n_in * w.world_size, dtype=x.dtype, device=w.device)
                nccl = lambda out=out, x=x: dist.all_gather_into_tensor(out, x)  # noqa: E731
                mine = lambda out=out, x=x: ditron.ops.all_gather(  # noqa: E731
                    x, engine="copy_engine", out=out)
            else:
                out = torch.empty(n_in // w.world_size, dtype=x.dtype, device=w.device)
                nccl = lambda out=out, x=x: dist.reduce_scatter_tensor(out, x)  # noqa: E731
                mine = lambda x=x: ditron.ops.reduce_scatter(x, engine="copy_engine")  # noqa: E731
            nccl()
            ref = out.clone()
            fns = {"nccl": (nccl, 1), "eager": (mine, 1)}
            results = {"eager": mine}
            for per in (1, 2):
                with ditron.ops.graph_safe():
                    mine()
                torch.cuda.synchronize()
                g = torch.cuda.CUDAGraph()
                with torch.cuda.graph(g):
                    res = [mine() for _ in range(per)]
                fns[f"replay{per}"] = (g.replay, per)
                results[f"replay{per}"] = lambda g=g, res=res: (g.replay(), res[-1])[1]
            for name, fn in results.items():
                if op == "all_gather":
                    out.fill_(float("nan"))
                got = fn()
                got = out if op == "all_gather" else got
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
                    fn, per = fns[k]
                    for _ in range(2):
                        fn()
                    busy[k] += batch(fn, group, False, per)
                    dev[k] += batch(fn, group, True, per)
            med = torch.tensor([[statistics.median(busy[k]), statistics.median(dev[k])]
                                for k in names], dtype=torch.float64)
            dist.all_reduce(med, op=dist.ReduceOp.MAX, group=group)
            base = med[0].tolist()
            row = [f"{op:14s} {nbytes >> 20:5d}M  nccl {base[0]:6.1f}/{base[1]:6.1f}"]
            for k, (b, d) in zip(names[1:], med[1:].tolist(), strict=True):
                row.append(f"{k} {b:6.1f}/{d:6.1f} ({base[0] / b:.2f}x)")
            lines.append("  ".join(row))
    return lines


if __name__ == "__main__":
    sizes = [int(s) << 20 for s in sys.argv[1].split(",")]
    out = ditron.launch(body, 2, sizes, backend="cuda")
    print("\n".join(ln for ln in out[1] if ln.startswith("check")))
    print("\n".join(out[0]))
