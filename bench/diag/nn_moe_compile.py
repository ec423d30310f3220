"""Diagnose eager vs compiled ExpertParallelMLP differences: max |diff| of the value and
each gradient, for runs of the same inputs (eager twice as the control)."""
from __future__ import annotations

import sys

import torch

import ditron


def case(cap_mult: int | None, backend_name: str) -> list[str]:
    w = ditron.world()
    me, dev = w.rank, w.device
    W = w.world_size
    k, hidden, ffn, experts = 2, 12, 8, 2 * W
    torch.manual_seed(3)
    cap = None if cap_mult is None else cap_mult * W * k
    layer = ditron.nn.ExpertParallelMLP(hidden, ffn, experts, max_recv_rows=cap)

    def loss(x, ids, wts):
        return layer(x, ids, wts, max_tokens=6).square().sum()

    compiled = torch.compile(loss, backend=backend_name, fullgraph=True)
    out = []
    for call in range(2):
        g = torch.Generator().manual_seed(10 * call + me)
        x = torch.randn(5 + me % 2, hidden, generator=g).to(dev).requires_grad_()
        ids = torch.randint(-1, experts, (x.shape[0], k), generator=g).to(dev)
        wts = torch.rand(x.shape[0], k, generator=g).to(dev).requires_grad_()
        leaves = [x, wts, layer.w1, layer.w2]
        res = []
        for fn in (loss, loss, compiled, compiled):
            for t in leaves:
                t.grad = None
            v = fn(x, ids, wts)
            v.backward()
            res.append([v.detach(), *(t.grad.clone() for t in leaves)])
        for name, j in (("eager2", 1), ("compiled", 2), ("compiled2", 3)):
            diffs = [f"{(a - b).abs().max().item():.2e}"
                     for a, b in zip(res[j], res[0], strict=True)]
            out.append(f"W={W} rank {me} cap={cap} call {call} {name}: {diffs}")
    return out


if __name__ == "__main__":
    backend = sys.argv[1] if len(sys.argv) > 1 else "cuda"
    for W in (1, 2):
        for cap in (None, 4):
            for r in ditron.launch(case, W, cap, "aot_eager", backend=backend):
                print("\n".join(r), flush=True)
