"""Eager all-gather into a symmetric out (the direct path) against the copy engine's inbox
exchange, the fused kernel and NCCL (into a preallocated out): busy / device us per call, the
slower rank's median over rounds of 20 back-to-back calls (device: queued behind a GPU
sleep); each variant's result checked against NCCL's first."""

from __future__ import annotations

import statistics
import sys

import torch
import torch.distributed as dist

import ditron

CALLS = 20
CYC = 1980
ROUNDS = 3


def batch(fn, group, head: bool) -> list[float]:
    torch.cuda.synchronize()
    dist.barrier(group=group)
    if head:
        torch.cuda._sleep(int(15 * 1000 * CYC))
    ev = [torch.cuda.Event(enable_timing=True) for _ in range(CALLS + 1)]
    ev[0].record()
    for i in range(CALLS):
        fn()
        ev[i + 1].record()
    ev[-1].synchronize()
    return [a.elapsed_time(b) * 1e3 for a, b in zip(ev, ev[1:], strict=False)]


def body(sizes):
    from ditron.runtime.world import current

    w = ditron.world()
    group = current().host_group
    lines = []
    for nbytes in sizes:
        n_in = nbytes // 2 // w.world_size
        x = torch.randn(n_in, device=w.device).bfloat16()
        ref_out = torch.empty(n_in * w.world_size, dtype=x.dtype, device=w.device)
        plain = torch.empty_like(ref_out)
        sym = ditron.empty((n_in * w.world_size,), torch.bfloat16)
        fns = {
            "nccl": lambda x=x, o=ref_out: dist.all_gather_into_tensor(o, x),
            "direct": lambda x=x, o=sym: ditron.ops.all_gather(x, engine="copy_engine", out=o),
            "ce_out": lambda x=x, o=plain: ditron.ops.all_gather(x, engine="copy_engine", out=o),
            "ce": lambda x=x: ditron.ops.all_gather(x, engine="copy_engine"),
            "sm_out": lambda x=x, o=plain: ditron.ops.all_gather(x, engine="sm", out=o),
        }
        fns["nccl"]()
        ref = ref_out.clone()
        for k, fn in fns.items():
            if k != "nccl":
                ok = torch.equal(fn(), ref)
                lines.append(f"check rank {w.rank} {nbytes >> 20}M {k}: {'ok' if ok else 'BAD'}")
        busy = {k: [] for k in fns}
        dev = {k: [] for k in fns}
        names = list(fns)
        for r in range(ROUNDS):
            for k in names[r % len(names):] + names[:r % len(names)]:
                fns[k]()
                busy[k] += batch(fns[k], group, False)
                dev[k] += batch(fns[k], group, True)
        med = torch.tensor([[statistics.median(busy[k]), statistics.median(dev[k])]
                            for k in names], dtype=torch.float64)
        dist.all_reduce(med, op=dist.ReduceOp.MAX, group=group)
        b0 = med[0, 0].item()
        row = [f"all_gather {nbytes >> 20:5d}M  nccl {b0:6.1f}/{med[0, 1].item():6.1f}"]
        for k, (b, d) in zip(names[1:], med[1:].tolist(), strict=True):
            row.append(f"{k} {b:6.1f}/{d:6.1f} ({b0 / b:.2f}x)")
        lines.append("  ".join(row))
        ditron.free(sym)
    return lines


if __name__ == "__main__":
    sizes = [int(s) << 20 for s in sys.argv[1].split(",")]
    out = ditron.launch(body, 2, sizes, backend="cuda")
    print("\n".join(ln for ln in out[1] if ln.startswith("check")))
    print("\n".join(out[0]))
