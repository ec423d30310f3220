"""s28c: which piece differs under torch.compile on the CUDA backend (2 ranks sharing a GPU):
forward values of each piece, compiled (backend "eager", fullgraph) against uncompiled."""
import torch

import ditron


def case():
    from ditron.nn import functional as F

    w = ditron.world()
    W, dev = w.world_size, w.device
    torch.manual_seed(1 + w.rank)
    x = torch.randn(5, 3, 20, device=dev)
    w1, b1 = torch.randn(8, 20, device=dev), torch.randn(8, device=dev)
    h = torch.randn(5 * W, 3, 8, device=dev)
    w2, b2 = torch.randn(20, 8, device=dev), torch.randn(20, device=dev)
    a2, bt = x.reshape(15, 20), w1.t()
    pieces = {
        "op ag_gemm": lambda: torch.ops.ditron.ag_gemm(a2, bt, "overlap"),
        "op ag_gemm_gathered": lambda: torch.ops.ditron.ag_gemm_gathered(a2, bt, "overlap")[0],
        "op gemm_rs": lambda: torch.ops.ditron.gemm_rs(h.reshape(-1, 8), w2.t(), "overlap"),
        "op all_reduce": lambda: torch.ops.ditron.all_reduce(b2),
        "all_gather_linear": lambda: F.all_gather_linear(x, w1, b1, method="overlap"),
        "all_gather_linear no bias": lambda: F.all_gather_linear(x, w1, method="overlap"),
        "linear_reduce_scatter": lambda: F.linear_reduce_scatter(h, w2, b2, method="overlap"),
        "linear_all_reduce": lambda: F.linear_all_reduce(h, w2, b2, method="overlap"),
        "all_gather": lambda: F.all_gather(x),
    }
    out = {}
    for name, fn in pieces.items():
        ref = fn().clone()
        for backend in ("eager", "aot_eager"):
            got = torch.compile(fn, backend=backend, fullgraph=True)()
            torch.cuda.synchronize()
            out[f"{name} [{backend}]"] = round((got - ref).abs().max().item(), 5)
            torch._dynamo.reset()
    grads = {
        "all_gather_linear": (F.all_gather_linear, x, w1, b1),
        "linear_reduce_scatter": (F.linear_reduce_scatter, h, w2, b2),
        "linear_all_reduce": (F.linear_all_reduce, h, w2, b2),
    }
    for name, (f, *args) in grads.items():
        def loss(a, b, c, f=f):
            return f(a, b, c, method="overlap").square().sum()
        for backend in ("none", "eager", "aot_eager"):
            ins = [t.detach().clone().requires_grad_() for t in args]
            fn = loss if backend == "none" else torch.compile(loss, backend=backend,
                                                              fullgraph=True)
            val = fn(*ins)
            val.backward()
            torch.cuda.synchronize()
            if backend == "none":
                ref = [val.detach(), *[t.grad for t in ins]]
            else:
                errs = [(g - r).abs().max().item() for g, r in
                        zip([val.detach(), *[t.grad for t in ins]], ref, strict=True)]
                out[f"grad {name} [{backend}] loss/inputs"] = [round(e, 5) for e in errs]
            torch._dynamo.reset()
    return out


if __name__ == "__main__":
    for r, d in enumerate(ditron.launch(case, 2, backend="cuda")):
        for k, v in d.items():
            print(r, k, v, flush=True)
