"""ditron.nn expert parallelism on edge inputs: the grouped GEMM's gradient outside its
groups, a layer's gradients on edge routings against torch autograd of a float64 model of
every rank's tokens, and a non-tensor input refused on every rank."""

from __future__ import annotations

import pytest
import torch

import ditron

from ..ops.poison import poison_empty
from ..ops.test_moe_edges import _kept
from .test_moe import _reference


@pytest.mark.parametrize("offsets", [[2, 3, 7], [0, 0, 4], [3, 3, 3]])
def test_grouped_gemm_gradients_outside_the_groups_are_zero(offsets):
    """``x``'s gradient rows before a nonzero ``offsets[0]`` were left unwritten (NaN in
    poisoned memory, garbage otherwise) though documented as zero."""
    from ditron.nn import moe as nn_moe

    torch.use_deterministic_algorithms(True, warn_only=True)
    torch.utils.deterministic.fill_uninitialized_memory = True  # torch.empty: NaN
    try:
        g = torch.Generator().manual_seed(sum(offsets))
        x = torch.randn(9, 6, generator=g).requires_grad_()
        w = torch.randn(2, 6, 5, generator=g).requires_grad_()
        dy = torch.randn(9, 5, generator=g)
        nn_moe.grouped_gemm(x, w, torch.tensor(offsets)).backward(dy)
    finally:
        torch.use_deterministic_algorithms(False)
    xr, wr = x.detach().double().requires_grad_(), w.detach().double().requires_grad_()
    loss = 0 * (xr.sum() + wr.sum())  # zero gradients where none flow
    for e in range(2):
        lo, hi = offsets[e], offsets[e + 1]
        loss = loss + ((xr[lo:hi] @ wr[e]) * dy[lo:hi].double()).sum()
    loss.backward()
    torch.testing.assert_close(x.grad.double(), xr.grad, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(w.grad.double(), wr.grad, rtol=1e-5, atol=1e-5)


def check_layer_edges() -> int:
    """Output and every gradient of ``ExpertParallelMLP`` on edge routings: duplicate
    experts in a token's top-k (k > experts per rank), every copy to one expert past the
    capacity (dropped copies: zero gradients), odd negative ids, int32 ids, non-contiguous
    tokens, ids and weights, fp16."""
    w, me, dev = ditron.world().world_size, ditron.world().rank, ditron.world().device
    poison_empty()
    checks = 0
    for n, (per_rank, k, cap, dtype, case) in enumerate([
            (1, 3, None, torch.float32, "duplicates"), (2, 2, 5, torch.float32, "one expert"),
            (2, 2, None, torch.float16, "odd ids")]):
        experts, hidden, ffn = per_rank * w, 8, 6
        g = torch.Generator().manual_seed(300 + n)  # the same draws on every rank
        tokens = [4 + r for r in range(w)]
        xs = [torch.randn(t, hidden, generator=g).to(dtype) for t in tokens]
        ids = [torch.randint(0, experts, (t, k), generator=g) for t in tokens]
        for i in ids:
            if case == "one expert":
                i.fill_(experts - 1)
            if case == "odd ids":
                i[0, 0], i[1, 1] = -5, -1
        wts = [torch.rand(t, k, generator=g) for t in tokens]
        gs = [torch.randn(t, hidden, generator=g).to(dtype) for t in tokens]
        full1 = (torch.randn(experts, hidden, ffn, generator=g) / hidden ** 0.5).to(dtype)
        full2 = (torch.randn(experts, ffn, hidden, generator=g) / ffn ** 0.5).to(dtype)
        layer = ditron.nn.ExpertParallelMLP(hidden, ffn, experts, dtype=dtype,
                                            max_recv_rows=cap)
        mine = slice(me * per_rank, (me + 1) * per_rank)
        with torch.no_grad():
            layer.w1.copy_(full1[mine])
            layer.w2.copy_(full2[mine])
        x, i, wt = (t.to(dev).t().contiguous().t() for t in (xs[me], ids[me].int(), wts[me]))
        x.requires_grad_()
        wt.requires_grad_()
        out = layer(x, i, wt, max_tokens=max(tokens))
        out.backward(gs[me].to(dev))
        kept = _kept(ids, experts, w, w * max(tokens) * k if cap is None else cap)
        assert case != "one expert" or not all(kp.all() for kp in kept)  # some dropped
        want = _reference(xs, ids, wts, kept, full1, full2, gs)
        tol = 1e-4 if dtype == torch.float32 else 2e-2
        for what, got, ref in [("out", out, want[0][me]), ("x.grad", x.grad, want[1][me]),
                               ("weights.grad", wt.grad, want[2][me]),
                               ("w1.grad", layer.w1.grad, want[3][mine]),
                               ("w2.grad", layer.w2.grad, want[4][mine])]:
            torch.testing.assert_close(got.cpu().double(), ref, rtol=tol, atol=tol,
                                       msg=f"rank {me} {case}: {what}")
            checks += 1
    return checks


@pytest.mark.parametrize("world_size", [1, 3])
def test_layer_gradients_on_edge_routings(world_size, backend):
    assert ditron.launch(check_layer_edges, world_size, backend=backend) == [15] * world_size


def check_x_not_a_tensor() -> str:
    """Rank 1 passes its tokens as a list; then a good call."""
    w, me, dev = ditron.world().world_size, ditron.world().rank, ditron.world().device
    layer = ditron.nn.ExpertParallelMLP(8, 6, 2 * w)
    x = torch.randn(5, 8, device=dev)
    ids = torch.randint(0, 2 * w, (5, 2), device=dev)
    wts = torch.rand(5, 2, device=dev)
    with pytest.raises(TypeError if me == 1 else ValueError) as err:
        layer(x.tolist() if me == 1 else x, ids, wts)
    assert layer(x, ids, wts).shape == (5, 8)
    return str(err.value)


def test_layer_refuses_tokens_that_are_not_a_tensor(backend):
    """A list raised AttributeError ("'list' object has no attribute 'device'") on its
    rank."""
    errors = ditron.launch(check_x_not_a_tensor, 2, backend=backend)
    assert "ExpertParallelMLP: x must be a torch.Tensor [tokens, 8], got list" in errors[1]
    assert "rank 1" in errors[0] and "x must be a torch.Tensor" in errors[0], errors[0]
