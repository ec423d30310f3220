"""s28b: which run of the compile test is wrong on the CUDA backend (2 ranks sharing a GPU):
per rank, the max error of each gradient against a float64 torch reference."""
import os
import sys

import torch

import ditron


def case(backend_name, reps):
    from ditron import nn

    w = ditron.world()
    W, rank, dev = w.world_size, w.rank, w.device
    torch.manual_seed(1)
    fc1 = torch.nn.Linear(20, 8 * W, dtype=torch.float64)
    fc2 = torch.nn.Linear(8 * W, 20, dtype=torch.float64)
    kw = {"method": "overlap", "dtype": torch.float32, "device": dev}
    col = nn.ColumnParallelLinear.from_linear(fc1, **kw)
    row = nn.RowParallelLinear.from_linear(fc2, **kw)

    torch.manual_seed(2)
    xf = torch.randn(5 * W, 3, 20, dtype=torch.float64, requires_grad=True)
    fc2(torch.nn.functional.gelu(fc1(xf))).square().sum().backward()
    sl = slice(rank * 5, rank * 5 + 5)
    sh = slice(rank * 8, rank * 8 + 8)
    refs = {"x": xf.grad[sl], "w1": fc1.weight.grad[sh], "w2": fc2.weight.grad[:, sh],
            "b2": fc2.bias.grad}

    def loss(x):
        return row(torch.nn.functional.gelu(col(x))).square().sum()

    fn = loss if backend_name == "none" else torch.compile(loss, backend=backend_name,
                                                           fullgraph=True)
    out = []
    for _ in range(reps):
        x = xf.detach()[sl].float().to(dev).requires_grad_()
        for p in (*col.parameters(), *row.parameters()):
            p.grad = None
        fn(x).backward()
        torch.cuda.synchronize()
        got = {"x": x.grad, "w1": col.weight.grad, "w2": row.weight.grad, "b2": row.bias.grad}
        out.append({k: round((got[k].double().cpu() - refs[k]).abs().max().item(), 6)
                    for k in refs})
    return out


if __name__ == "__main__":
    for b in sys.argv[1:]:
        try:
            print(b, os.environ.get("TAG", ""), ditron.launch(case, 2, b, 3, backend="cuda"),
                  flush=True)
        except Exception as e:  # noqa: BLE001
            print(b, "failed:", str(e)[-600:], flush=True)
