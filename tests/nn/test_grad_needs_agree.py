"""Ranks whose operands differ in whether they need a gradient (``requires_grad`` on one
rank only, one rank under ``torch.no_grad()``, one rank's experts frozen) build different
autograd graphs, so their backward passes make different collectives: one rank waited for
ever in a collective its peers never made (outside debug mode), or paired it with their
next call's. ``ditron.nn``'s MoE functions and layer and its tensor-parallel functions
agree on those needs at the forward call: every rank raises ``ValueError`` naming each
rank's ``needs_grad`` before any kernel, and the next good call works. Differences that
change no collective (``linear_all_reduce``'s input, one expert matrix frozen on one rank
where ``x`` needs a gradient) still run, with torch's gradients."""

from __future__ import annotations

import pytest
import torch

import ditron

#: tokens per rank, hidden size, ffn size, top-k; 2 experts per rank
T, H, F, K = 5, 6, 4, 2


def _raises_on_every_rank(call, field: str = "needs_grad") -> str:
    """``call()`` raises ``ValueError`` naming both ranks' ``field`` (gradient needs)."""
    with pytest.raises(ValueError, match=f"{field} differs") as err:
        call()
    text = str(err.value)
    assert "rank 0: " in text and "rank 1: " in text, text
    return text.split(":")[0]


def _moe_cases() -> list[str]:
    from ditron.nn import moe as nn_moe

    w, me, dev = ditron.world().world_size, ditron.world().rank, ditron.world().device
    torch.manual_seed(3)  # the same experts on every rank
    experts = [(torch.nn.Linear(H, F, bias=False, device=dev),
                torch.nn.Linear(F, H, bias=False, device=dev)) for _ in range(2 * w)]
    layer = ditron.nn.ExpertParallelMLP.from_experts(experts)
    g = torch.Generator().manual_seed(100 + me)
    x = torch.randn(T, H, generator=g).to(dev)
    ids = torch.randint(0, 2 * w, (T, K), generator=g).to(dev)
    wts = torch.rand(T, K, generator=g).to(dev)
    seen = []
    # the router's weights need a gradient on rank 0 only: its combine's backward made the
    # weights' dot products (a collective) alone
    seen.append(_raises_on_every_rank(
        lambda: layer(x, ids, wts.clone().requires_grad_(me == 0)).sum().backward()))
    # rank 1 under no_grad (its output's backward never runs)
    with torch.set_grad_enabled(me == 0):
        seen.append(_raises_on_every_rank(lambda: layer(x, ids, wts)))
    # rank 1's experts frozen, x needing no gradient: rank 0 alone sent the output's
    # gradient back to the experts
    layer.requires_grad_(me == 0)
    seen.append(_raises_on_every_rank(lambda: layer(x, ids, wts).sum().backward()))
    layer.requires_grad_(True)
    # the functions: x of the dispatch, y of the combine
    seen.append(_raises_on_every_rank(
        lambda: nn_moe.moe_dispatch(x.clone().requires_grad_(me == 0), ids, 2 * w)))
    d = nn_moe.moe_dispatch(x, ids, 2 * w)
    seen.append(_raises_on_every_rank(
        lambda: nn_moe.moe_combine(d.x.clone().requires_grad_(me == 1), d, wts)))
    # a difference that changes no collective: x needs a gradient on both ranks, rank 1's
    # w1 frozen; x's gradient is torch's
    layer.w1.requires_grad_(me == 0)
    xg = x.clone().requires_grad_()
    out = layer(xg, ids, wts)
    out.backward(torch.ones_like(out))
    assert (layer.w1.grad is None) == (me == 1)
    xr = x.clone().requires_grad_()
    ref = torch.stack([sum(wts[t, j] * experts[int(ids[t, j])][1](torch.nn.functional.gelu(
        experts[int(ids[t, j])][0](xr[t]))) for j in range(K)) for t in range(T)])
    ref.sum().backward()
    torch.testing.assert_close(out, ref)
    torch.testing.assert_close(xg.grad, xr.grad)
    # still in step: a good call of the functions (identity experts) matches torch
    xg = x.clone().requires_grad_()
    wg = wts.clone().requires_grad_()
    d = nn_moe.moe_dispatch(xg, ids, 2 * w)
    out = nn_moe.moe_combine(d.x, d, wg)
    out.backward(torch.ones_like(out))
    torch.testing.assert_close(out, x * wts.sum(1, keepdim=True))
    torch.testing.assert_close(xg.grad, wts.sum(1, keepdim=True).expand(T, H))
    torch.testing.assert_close(wg.grad, x.sum(1, keepdim=True).expand(T, K))
    return seen


def _linear_cases() -> list[str]:
    from ditron.nn import functional as fn

    w, me, dev = ditron.world().world_size, ditron.world().rank, ditron.world().device
    g = torch.Generator().manual_seed(7)  # the same draws on every rank
    xs = torch.randn(w, 4, 8, generator=g)
    ws = torch.randn(w, 6, 8, generator=g)
    x, wt = xs[me].to(dev), ws[me].to(dev)
    bias = torch.randn(6, generator=g).to(dev)
    mine = me == 0
    seen = []
    # keep_gathered where the weight needs a gradient: rank 1's backward gathered x again,
    # rank 0's kept it
    seen.append(_raises_on_every_rank(
        lambda: fn.all_gather_linear(x, wt.clone().requires_grad_(), keep_gathered=mine)
        .sum().backward(), "keep_gathered"))
    for call in (
            # x: rank 0's backward made gemm_rs alone
            lambda: fn.all_gather_linear(x.clone().requires_grad_(mine), wt.clone()
                                         .requires_grad_()).sum().backward(),
            # the bias: rank 0's backward all-reduced its gradient alone
            lambda: fn.linear_reduce_scatter(x, wt, bias.clone().requires_grad_(mine))
            .sum().backward(),
            lambda: fn.all_gather(x.clone().requires_grad_(mine)).sum().backward(),
            lambda: fn.reduce_scatter(x.clone().requires_grad_(mine)).sum().backward(),
            lambda: fn.copy_to_tensor_parallel(x.clone().requires_grad_(mine))
            .sum().backward()):
        seen.append(_raises_on_every_rank(call))
    # rank 1 under no_grad: rank 0's backward made gemm_rs and all_gather alone
    with torch.set_grad_enabled(mine):
        seen.append(_raises_on_every_rank(
            lambda: fn.all_gather_linear(x.clone().requires_grad_(), wt)))
    # no collective in linear_all_reduce's backward: ranks may differ; torch's gradients
    xg = x.clone().requires_grad_(mine)
    wg = wt.clone().requires_grad_()
    y = fn.linear_all_reduce(xg, wg)
    y.backward(torch.ones_like(y))
    X, Wt = xs.clone().requires_grad_(), ws.clone().requires_grad_()
    ref = sum(X[q] @ Wt[q].T for q in range(w))
    ref.backward(torch.ones_like(ref))
    torch.testing.assert_close(y, ref.to(dev), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(wg.grad, Wt.grad[me].to(dev), rtol=1e-5, atol=1e-5)
    assert mine == (xg.grad is not None)
    if mine:
        torch.testing.assert_close(xg.grad, X.grad[me].to(dev), rtol=1e-5, atol=1e-5)
    # still in step: the column function with every need alike
    xg = x.clone().requires_grad_()
    y = fn.all_gather_linear(xg, wg)
    y.backward(torch.ones_like(y))
    full = X.detach().reshape(-1, 8)
    torch.testing.assert_close(y, (full @ ws[me].T).to(dev), rtol=1e-5, atol=1e-5)
    # every rank's loss reaches this rank's rows through every rank's weight
    dx = sum(torch.ones(4, 6) @ ws[q] for q in range(w))
    torch.testing.assert_close(xg.grad, dx.to(dev), rtol=1e-5, atol=1e-5)
    return seen


MOE = ["ditron.nn.ExpertParallelMLP"] * 3 + ["ditron.nn.moe.moe_dispatch",
                                             "ditron.nn.moe.moe_combine"]
LINEAR = ["ditron.nn.all_gather_linear"] * 2 + [
    "ditron.nn.linear_reduce_scatter", "ditron.nn.all_gather", "ditron.nn.reduce_scatter",
    "ditron.nn.copy_to_tensor_parallel", "ditron.nn.all_gather_linear"]


@pytest.mark.parametrize("debug", [False, True])
@pytest.mark.parametrize("case", ["moe", "linear"])
def test_ranks_differing_in_gradient_needs_raise_at_forward(case, debug, monkeypatch,
                                                           backend):
    """Outside debug mode (no wait timeout, each signature checked once) the old code
    hung in the backward pass until the launch timed out; in debug mode it raised there,
    on a collective's agreement paired with the peer's next call."""
    monkeypatch.setenv("DITRON_WAIT_TIMEOUT", "60" if debug else "0")
    monkeypatch.setenv("DITRON_LAUNCH_TIMEOUT", "60")  # the old hang, short
    fn, want = (_moe_cases, MOE) if case == "moe" else (_linear_cases, LINEAR)
    assert ditron.launch(fn, 2, backend=backend) == [want, want]
