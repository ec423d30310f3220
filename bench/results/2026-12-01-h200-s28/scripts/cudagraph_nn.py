"""s28e, s28f: ditron.nn under torch.compile(mode="reduce-overhead") (CUDA graphs by
inductor's cudagraph trees), 2 ranks sharing a GPU: the first calls inside
ditron.ops.graph_safe() (s28f: an uncompiled warm-up first), then replays on new inputs
against the uncompiled layers."""
import torch

import ditron


def case(train: bool, warm_calls: int, eager_first: bool):
    from ditron import nn

    w = ditron.world()
    dev = w.device
    torch.manual_seed(1)
    kw = {"method": "overlap", "dtype": torch.bfloat16}
    col = nn.ColumnParallelLinear(256, 128 * w.world_size, **kw)
    row = nn.RowParallelLinear(128 * w.world_size, 256, **kw)
    params = (*col.parameters(), *row.parameters())

    def step(x):
        y = row(torch.nn.functional.gelu(col(x)))
        if train:
            y.float().square().sum().backward()
        return y

    compiled = torch.compile(step, mode="reduce-overhead", fullgraph=not train)
    report = []
    try:
        with ditron.ops.graph_safe():
            if eager_first:  # the ops' workspaces made outside inductor's graph pool
                step(torch.randn(96, 2, 256, device=dev, dtype=torch.bfloat16,
                                 requires_grad=train))
            for _ in range(warm_calls):
                compiled(torch.randn(96, 2, 256, device=dev, dtype=torch.bfloat16,
                                     requires_grad=train))
        torch.cuda.synchronize()
        for call in range(4):
            torch.manual_seed(50 + call)
            x = torch.randn(96, 2, 256, device=dev, dtype=torch.bfloat16, requires_grad=train)
            for p in params:
                p.grad = None
            got = compiled(x).clone()
            grads = [p.grad.clone() for p in params] if train else []
            for p in params:
                p.grad = None
            ref = step(x.detach().requires_grad_(train))
            refs = [p.grad for p in params] if train else []
            torch.cuda.synchronize()
            errs = [(got.float() - ref.float()).abs().max().item()]
            errs += [(g.float() - r.float()).abs().max().item()
                     for g, r in zip(grads, refs, strict=True)]
            report.append([round(e, 4) for e in errs])
    except Exception as e:  # noqa: BLE001
        report.append(f"{type(e).__name__}: {str(e)[:400]}")
    return report


if __name__ == "__main__":
    for train in (False, True):
        print("train" if train else "forward", "eager warm-up, then 2 compiled calls",
              ditron.launch(case, 2, train, 2, True, backend="cuda"), flush=True)
