"""ditron.nn expert parallelism (ExpertParallelMLP and its functions): output and every
gradient against a float64 torch model of all ranks' tokens and all experts."""

from __future__ import annotations

import pytest
import torch

import ditron
from ditron.runtime.world import current

from ..ops.poison import poison_empty
from ..ops.test_moe import _kept

TOL = {torch.float32: (1e-4, 1e-4), torch.bfloat16: (5e-2, 5e-2)}


def _reference(xs, ids, wts, kept, w1, w2, gs):
    """Float64 outputs and gradients of ``sum_s <out_s, g_s>`` (lists over ranks)."""
    xs = [x.detach().double().requires_grad_() for x in xs]
    wts = [w.detach().double().requires_grad_() for w in wts]
    w1 = w1.double().requires_grad_()
    w2 = w2.double().requires_grad_()
    outs = []
    for x, i, wt, kp in zip(xs, ids, wts, kept, strict=True):
        out = torch.zeros_like(x)
        for j in range(i.shape[1]):
            for t in range(x.shape[0]):
                e = int(i[t, j])
                if e >= 0 and kp[t, j]:
                    h = torch.nn.functional.gelu(x[t] @ w1[e])
                    out = out.index_add(0, torch.tensor([t]), (wt[t, j] * (h @ w2[e]))[None])
        outs.append(out)
    loss = sum((o * g.double()).sum() for o, g in zip(outs, gs, strict=True))
    leaves = [w1, w2, *xs, *wts]
    (loss + 0 * sum(t.sum() for t in leaves)).backward()  # zero gradients where none flow
    return outs, [x.grad for x in xs], [w.grad for w in wts], w1.grad, w2.grad


def check_layer(cap_rows: int | None) -> int:
    rt = current()
    w, me, dev = rt.world.world_size, rt.world.rank, rt.world.device
    poison_empty()
    checks = 0
    for call, dtype in enumerate((torch.float32, torch.bfloat16, torch.float32)):
        per_rank, k, hidden, ffn = 2, 2, 12, 10
        experts = per_rank * w
        g = torch.Generator().manual_seed(100 + call)
        tokens = [0 if (call == 1 and r == w - 1) else 4 + r + call for r in range(w)]
        xs = [torch.randn(t, hidden, generator=g).to(dtype) for t in tokens]
        ids = [torch.randint(0, experts, (t, k), generator=g) for t in tokens]
        for i in ids:
            i[torch.rand(i.shape, generator=g) < 0.15] = -1
        wts = [torch.rand(t, k, generator=g) for t in tokens]
        gs = [torch.randn(t, hidden, generator=g).to(dtype) for t in tokens]
        layer = ditron.nn.ExpertParallelMLP(hidden, ffn, experts, dtype=dtype,
                                            max_recv_rows=cap_rows)
        full1 = torch.randn(experts, hidden, ffn, generator=g).div(hidden ** 0.5).to(dtype)
        full2 = torch.randn(experts, ffn, hidden, generator=g).div(ffn ** 0.5).to(dtype)
        mine = slice(me * per_rank, (me + 1) * per_rank)
        with torch.no_grad():
            layer.w1.copy_(full1[mine])
            layer.w2.copy_(full2[mine])
        x = xs[me].to(dev).requires_grad_()
        wt = wts[me].to(dev).requires_grad_()
        out = layer(x, ids[me].to(dev), wt, max_tokens=max(tokens))
        out.backward(gs[me].to(dev))
        cap = w * max(tokens) * k if cap_rows is None else cap_rows
        kept = _kept(w, experts, cap, ids)
        ref_out, ref_x, ref_w, ref_w1, ref_w2 = _reference(xs, ids, wts, kept, full1, full2, gs)
        rtol, atol = TOL[dtype]
        for what, got, want in [("out", out, ref_out[me]), ("x.grad", x.grad, ref_x[me]),
                                ("weights.grad", wt.grad, ref_w[me]),
                                ("w1.grad", layer.w1.grad, ref_w1[mine]),
                                ("w2.grad", layer.w2.grad, ref_w2[mine])]:
            assert got is not None and want is not None and got.shape == want.shape, what
            torch.testing.assert_close(got.cpu().double(), want, rtol=rtol, atol=atol,
                                       msg=f"rank {me} call {call}: {what}")
            checks += 1
    return checks


@pytest.mark.parametrize("world_size", [1, 2, 3, 4])
def test_expert_parallel_mlp_matches_torch(world_size, backend):
    assert ditron.launch(check_layer, world_size, None, backend=backend) == [15] * world_size


def test_expert_parallel_mlp_with_drops(backend):
    assert ditron.launch(check_layer, 3, 5, backend=backend) == [15] * 3


def check_autocast() -> int:
    """fp32 experts under bf16 autocast: bf16 output, fp32 gradients, equal to the float64
    model of the bf16-rounded tokens and weights."""
    rt = current()
    w, me, dev = rt.world.world_size, rt.world.rank, rt.world.device
    per_rank, k, hidden, ffn = 2, 2, 16, 12
    experts = per_rank * w
    g = torch.Generator().manual_seed(7)
    xs = [torch.randn(5 + r, hidden, generator=g) for r in range(w)]
    ids = [torch.randint(0, experts, (5 + r, k), generator=g) for r in range(w)]
    wts = [torch.rand(5 + r, k, generator=g) for r in range(w)]
    gs = [torch.randn(5 + r, hidden, generator=g).bfloat16() for r in range(w)]
    full1 = torch.randn(experts, hidden, ffn, generator=g) / hidden ** 0.5
    full2 = torch.randn(experts, ffn, hidden, generator=g) / ffn ** 0.5
    layer = ditron.nn.ExpertParallelMLP(hidden, ffn, experts)
    mine = slice(me * per_rank, (me + 1) * per_rank)
    with torch.no_grad():
        layer.w1.copy_(full1[mine])
        layer.w2.copy_(full2[mine])
    x = xs[me].to(dev).requires_grad_()
    with torch.autocast(dev.type, dtype=torch.bfloat16):
        out = layer(x, ids[me].to(dev), wts[me].to(dev), max_tokens=5 + w - 1)
    assert out.dtype == torch.bfloat16
    out.backward(gs[me].to(dev))
    assert layer.w1.grad.dtype == torch.float32 and x.grad.dtype == torch.float32
    kept = [torch.ones(i.shape, dtype=torch.bool) for i in ids]
    bf = [t.bfloat16() for t in xs]
    ref_out, ref_x, _, ref_w1, ref_w2 = _reference(bf, ids, wts, kept, full1.bfloat16(),
                                                    full2.bfloat16(), gs)
    for what, got, want in [("out", out, ref_out[me]), ("x.grad", x.grad, ref_x[me]),
                            ("w1.grad", layer.w1.grad, ref_w1[mine]),
                            ("w2.grad", layer.w2.grad, ref_w2[mine])]:
        torch.testing.assert_close(got.cpu().double(), want, rtol=5e-2, atol=5e-2,
                                   msg=f"rank {me} autocast: {what}")
    return 4


def test_expert_parallel_mlp_follows_autocast(backend):
    assert ditron.launch(check_autocast, 2, backend=backend) == [4, 4]


def check_layer_refusals() -> int:
    dev = ditron.world().device
    with pytest.raises(ValueError, match="num_experts must be a positive multiple"):
        ditron.nn.ExpertParallelMLP(8, 4, 3)
    layer = ditron.nn.ExpertParallelMLP(8, 4, 2)
    x = torch.randn(3, 8, device=dev, dtype=torch.bfloat16)
    ids = torch.zeros(3, 1, dtype=torch.int64, device=dev)
    with pytest.raises(ValueError, match="input dtype torch.bfloat16 != weight dtype"):
        layer(x, ids, torch.ones(3, 1, device=dev))  # no autocast: no silent cast
    return 2


def test_expert_parallel_mlp_refuses_bad_input(backend):
    assert ditron.launch(check_layer_refusals, 2, backend=backend) == [2, 2]
