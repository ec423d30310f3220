"""Which ditron.nn MoE function differs between eager and torch.compile on a GPU: each
alone (aot_eager and dynamo-only "eager" backends), max |diff| of value and gradients."""
from __future__ import annotations

import contextlib
import sys

import torch

import ditron
from ditron.nn import library
from ditron.nn import moe as M


def parts(backend_name: str) -> list[str]:
    w = ditron.world()
    me, dev, W = w.rank, w.device, w.world_size
    k, hidden, ffn, experts = 2, 12, 8, 2 * W
    g = torch.Generator().manual_seed(me)
    x = torch.randn(5, hidden, generator=g).to(dev).requires_grad_()
    ids = torch.randint(-1, experts, (5, k), generator=g).to(dev)
    wts = torch.rand(5, k, generator=g).to(dev).requires_grad_()
    w1 = torch.randn(experts // W, hidden, ffn, generator=g).to(dev).requires_grad_()
    grouped, routing, sizes = M._dispatch(x.detach(), ids, experts, None, None)
    valid = library._in_groups(grouped.shape[0], routing[0])
    gx = torch.randn(grouped.shape[0], hidden, generator=g).to(dev).requires_grad_()

    def dispatch(x):
        gr, _, _ = M._dispatch(x, ids, experts, None, None)
        return torch.where(valid, gr, 0).square().sum()

    def gemm(gx, w1):
        return torch.where(valid, M.grouped_gemm(gx, w1, routing[0]), 0).square().sum()

    def combine(gx, wts):
        return M._combine(gx, routing, sizes, wts).square().sum()

    def gemm_dx_only(gx):
        return torch.where(valid, M.grouped_gemm(gx, w1.detach(), routing[0]), 0).square().sum()

    torch.manual_seed(3)
    layer = ditron.nn.ExpertParallelMLP(hidden, ffn, experts)

    def whole(x, wts):
        return layer(x, ids, wts).square().sum()

    def whole_cloned(x, wts):  # the same; its calls below clone every saved tensor
        return layer(x, ids, wts).square().sum()

    out = []
    for name, fn, leaves in (("layer", whole, [x, wts]), ("layer_cloned", whole_cloned, [x, wts]),
                             ("dispatch", dispatch, [x]), ("gemm", gemm, [gx, w1]),
                             ("gemm_dx", gemm_dx_only, [gx]), ("combine", combine, [gx, wts])):
        res = []
        for f in (fn, torch.compile(fn, backend=backend_name, fullgraph=True)):
            for t in leaves:
                t.grad = None
            hooks = (torch.autograd.graph.saved_tensors_hooks(lambda t: t.clone(), lambda t: t)
                     if name == "layer_cloned" else contextlib.nullcontext())
            with hooks:
                v = f(*leaves)
            v.backward()
            res.append([v.detach(), *(t.grad.clone() for t in leaves)])
        diffs = [f"{(a - b).abs().max().item():.2e}" for a, b in zip(res[1], res[0], strict=True)]
        out.append(f"{backend_name} W={W} rank {me} {name}: {diffs}")
    return out


def no_donation(backend_name: str) -> list[str]:
    torch._functorch.config.donated_buffer = False
    return [f"donated_buffer=False: {r}" for r in parts(backend_name)]


if __name__ == "__main__":
    backend = sys.argv[1] if len(sys.argv) > 1 else "cuda"
    worlds = [int(v) for v in sys.argv[2].split(",")] if len(sys.argv) > 2 else [1, 2]
    comps = sys.argv[3].split(",") if len(sys.argv) > 3 else ["eager", "aot_eager"]
    for comp in comps:
        for W in worlds:
            fn = no_donation if comp == "aot_eager_nodonate" else parts
            comp = "aot_eager" if comp == "aot_eager_nodonate" else comp
            for r in ditron.launch(fn, W, comp, backend=backend):
                print("\n".join(r), flush=True)
