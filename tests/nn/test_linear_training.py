"""ditron.nn's tensor-parallel linear functions and layers as a training loop uses them:
every combination of operands that need a gradient (frozen weights, inputs without
gradients, no bias) in float16 with 3-D inputs, optimizer steps that change the weights in
place between calls, and ranks whose inputs differ in shape but not in rows x features,
against a float64 torch model that one process computes whole."""

from __future__ import annotations

import pytest
import torch

import ditron

from ..ops.poison import poison_empty

TOL = {torch.float32: 1e-5, torch.float16: 4e-3}


def _close(name: str, got: torch.Tensor, ref: torch.Tensor) -> None:
    assert got.shape == ref.shape, f"{name}: shape {tuple(got.shape)} != {tuple(ref.shape)}"
    tol = TOL[got.dtype]
    got, ref = got.detach().double().cpu(), ref.detach().double().cpu()
    assert torch.isfinite(got).all(), f"{name}: unwritten (NaN) or non-finite elements"
    err = (got - ref).abs().max().item()
    scale = max(ref.abs().max().item(), 1e-6)
    assert err <= 4 * tol * scale, f"{name}: max error {err} vs scale {scale}"


#: (needs a gradient: input, weight, bias; None: no bias)
NEEDS = [(True, False, False), (False, True, True), (True, True, None)]


def _reference(name: str, W: int, s: int, b: int, k: int, n: int, bias: bool):
    """Every rank's operands of ``ditron.nn.functional.<name>`` (float64, the same on every
    rank), loss weights, and the whole computation's output and gradients per rank."""
    f64 = {"dtype": torch.float64}
    sp_rows = name == "all_gather_linear"
    X = torch.randn(W, s, b, k, **f64) if sp_rows or name == "linear_all_reduce" \
        else torch.randn(W, W * s, b, k, **f64)  # row-parallel: every row, a feature shard
    Wt = torch.randn(W, n, k, **f64)
    B = torch.randn(W, n, **f64) if sp_rows else torch.randn(n, **f64).expand(W, n)
    leaves = [t.clone().requires_grad_() for t in (X, Wt, B)]
    Xr, Wr, Br = leaves
    if sp_rows:  # rank q: every rank's rows times its own output features
        full = Xr.reshape(W * s, b, k)
        ys = [full @ Wr[q].T + (Br[q] if bias else 0) for q in range(W)]
    else:
        whole = sum(Xr[q] @ Wr[q].T for q in range(W)) + (Br[0] if bias else 0)
        ys = ([whole[q * s:(q + 1) * s] for q in range(W)] if name == "linear_reduce_scatter"
              else [whole] * W)
    G = [torch.randn(y.shape, **f64) for y in ys]
    if name == "linear_all_reduce":
        G = [G[0]] * W  # a replicated output's loss: the same on every rank
        ys[0].mul(G[0]).sum().backward()
    else:
        sum((y * g).sum() for y, g in zip(ys, G, strict=True)).backward()
    gb = None if not bias else Br.grad if sp_rows else Br.grad.sum(0).expand(W, n)
    grads = (Xr.grad, Wr.grad, gb)
    return (X, Wt, B), G, [y.detach() for y in ys], grads


def _needs_case(s: int, b: int, k: int, n: int) -> int:
    """Each function with each set of operands needing a gradient (``NEEDS``; the column
    function with and without ``keep_gathered``), float16, input ``[s, b, k]`` per rank."""
    from ditron.nn import functional as F

    poison_empty()
    w = ditron.world()
    W, r, dev = w.world_size, w.rank, w.device
    checks = 0
    for name in ("all_gather_linear", "linear_reduce_scatter", "linear_all_reduce"):
        for keep in ((True, False) if name == "all_gather_linear" else (True,)):
            for needs in NEEDS:
                torch.manual_seed(100 + checks)  # the same operands on every rank
                (X, Wt, B), G, ys, grads = _reference(name, W, s, b, k, n, needs[2] is not None)
                x, wt = X[r].to(dev, torch.float16), Wt[r].to(dev, torch.float16)
                bias = None if needs[2] is None else B[r].to(dev, torch.float16)
                operands = [x, wt, bias]
                for t, need in zip(operands, needs, strict=True):
                    if t is not None:
                        t.requires_grad_(bool(need))
                kw = {"keep_gathered": keep} if name == "all_gather_linear" else {}
                y = getattr(F, name)(x, wt, bias, **kw)
                tag = f"{name} keep={keep} needs={needs}"
                _close(f"{tag} output", y, ys[r])
                (y * G[r].to(dev, y.dtype)).sum().backward()
                for what, t, need, ref in zip("xwb", operands, needs, grads, strict=True):
                    if t is None:
                        continue
                    if need:
                        _close(f"{tag} {what} grad", t.grad, ref[r])
                    else:
                        assert t.grad is None, f"{tag} {what}: a gradient it does not need"
                checks += 1
    return checks


def test_functions_for_every_gradient_need(backend):
    # 3 ranks, 3 sequence rows x 2 batch per rank (6 rows: not a multiple of the tile)
    assert ditron.launch(_needs_case, 3, 3, 2, 12, 5, backend=backend) == [12] * 3


def _steps_case(steps: int) -> int:
    """An attention-like pair and an MLP pair of layers (residuals, different shapes), both
    layer modes, trained by SGD for ``steps`` steps on fresh inputs beside the same torch
    model: outputs and updated parameters agree at every step (the optimizer changes the
    weights in place between calls)."""
    from ditron import nn

    poison_empty()
    w = ditron.world()
    W, r, dev = w.world_size, w.rank, w.device
    h, s, b = 12, 3, 2
    kinds = (nn.ColumnParallelLinear, nn.RowParallelLinear) * 2
    checks = 0
    for sp in (True, False):
        torch.manual_seed(0)  # the same model on every rank
        sizes = [(h, 3 * W), (3 * W, h), (h, 4 * W), (4 * W, h)]
        ref = [torch.nn.Linear(i, o, dtype=torch.float64) for i, o in sizes]
        for layer in ref:
            with torch.no_grad():
                layer.bias.uniform_(-1, 1)
        tp = [kind.from_linear(layer, sequence_parallel=sp, dtype=torch.float32, device=dev)
              for kind, layer in zip(kinds, ref, strict=True)]
        opts = [torch.optim.SGD([p for m in model for p in m.parameters()], lr=3e-3)
                for model in (ref, tp)]

        def forward(m, x):
            x = x + m[1](torch.tanh(m[0](x)))
            return x + m[3](torch.tanh(m[2](x)))

        for step in range(steps):
            torch.manual_seed(50 + step)
            x = torch.randn(W * s, b, h, dtype=torch.float64)
            rows = slice(r * s, (r + 1) * s) if sp else slice(None)
            outs = []
            for model, opt, inp in ((ref, opts[0], x), (tp, opts[1], x[rows].float().to(dev))):
                opt.zero_grad()
                y = forward(model, inp)
                y.double().square().sum().backward()
                opt.step()
                outs.append(y)
            _close(f"sp={sp} step {step} output", outs[1], outs[0][rows])
            for i, (kind, a, want) in enumerate(zip(kinds, tp, ref, strict=True)):
                n = a.weight.shape[0] if kind is nn.ColumnParallelLinear else a.weight.shape[1]
                part = slice(r * n, (r + 1) * n)
                if kind is nn.ColumnParallelLinear:
                    shard, bias = want.weight[part], want.bias[part]
                else:
                    shard, bias = want.weight[:, part], want.bias
                _close(f"sp={sp} step {step} layer {i} weight", a.weight, shard)
                _close(f"sp={sp} step {step} layer {i} bias", a.bias, bias)
            checks += 1
    return checks


def test_training_steps_match_torch(backend):
    assert ditron.launch(_steps_case, 2, 3, backend=backend) == [6, 6]


def _shapes_case() -> list[str]:
    """Rank 0 passes ``[2, 3, k]`` where rank 1 passes ``[3, 2, k]`` (the same rows x
    features): each function raises on every rank, naming the shapes. The ops agreed on
    the 2-D form only, so the functions ran, each rank viewing the other's rows in its own
    shape (rank 0 returned ``[4, 3, n]``, rank 1 ``[6, 2, n]``). A rank refusing a 3-D
    input makes every rank raise; a good call works after."""
    from ditron.nn import functional as F

    w = ditron.world()
    r, dev = w.rank, w.device
    torch.manual_seed(9)
    wt = torch.randn(4, 8, device=dev)
    shapes = {"all_gather_linear": [(2, 3, 8), (3, 2, 8)],
              "linear_reduce_scatter": [(4, 3, 8), (6, 2, 8)],
              "linear_all_reduce": [(2, 3, 8), (3, 2, 8)]}
    seen = []
    for name, (mine, theirs) in shapes.items():
        x = torch.randn(mine if r == 0 else theirs, device=dev)
        with pytest.raises(ValueError, match=r"shape differs") as err:
            getattr(F, name)(x, wt)
        assert str(mine) in str(err.value) and str(theirs) in str(err.value), err.value
        seen.append(str(err.value).split(":")[0])
        # rank 0 alone refuses its 3-D input (a float64 bias): its peers, in the check of
        # the shapes, raise too, naming it
        bias = torch.zeros(4, device=dev, dtype=torch.float64 if r == 0 else torch.float32)
        with pytest.raises(ValueError, match=r"bias \(torch.float64") as err:
            getattr(F, name)(torch.randn(mine, device=dev), wt, bias)
        assert r == 0 or "rank 0: ValueError" in str(err.value), err.value
        y = getattr(F, name)(torch.randn(mine, device=dev), wt)  # still usable
        assert torch.isfinite(y).all()
    return seen


def test_ranks_with_different_input_shapes_raise(backend):
    names = ["ditron.nn.all_gather_linear", "ditron.nn.linear_reduce_scatter",
             "ditron.nn.linear_all_reduce"]
    assert ditron.launch(_shapes_case, 2, backend=backend) == [names, names]
