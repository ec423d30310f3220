"""ditron.nn expert parallelism with ranks that hold no tokens, trained on ``out.sum()``:
the gradient autograd hands the layer is then an empty tensor of strides ``(0, 0)``, which
``contiguous()`` leaves as it is (the combine's backward failed in its kernel's checks)."""

from __future__ import annotations

import pytest
import torch

import ditron

from .test_moe import _reference


def _zero_tokens_case(tokens: list[int]) -> int:
    w, me, dev = ditron.world().world_size, ditron.world().rank, ditron.world().device
    hidden, ffn, k, experts = 8, 6, 2, 2 * w
    g = torch.Generator().manual_seed(sum(tokens))  # the same draws on every rank
    xs = [torch.randn(t, hidden, generator=g) for t in tokens]
    ids = [torch.randint(-1, experts, (t, k), generator=g) for t in tokens]
    wts = [torch.rand(t, k, generator=g) for t in tokens]
    full1 = torch.randn(experts, hidden, ffn, generator=g) / hidden ** 0.5
    full2 = torch.randn(experts, ffn, hidden, generator=g) / ffn ** 0.5
    layer = ditron.nn.ExpertParallelMLP(hidden, ffn, experts)
    mine = slice(2 * me, 2 * me + 2)
    with torch.no_grad():
        layer.w1.copy_(full1[mine])
        layer.w2.copy_(full2[mine])
    x = xs[me].to(dev).requires_grad_()
    wt = wts[me].to(dev).requires_grad_()
    out = layer(x, ids[me].to(dev), wt, max_tokens=max(tokens))
    out.sum().backward()  # a gradient of strides (0, 0)
    kept = [torch.ones(i.shape, dtype=torch.bool) for i in ids]
    ones = [torch.ones(t, hidden) for t in tokens]
    ref_out, ref_x, ref_w, ref_w1, ref_w2 = _reference(xs, ids, wts, kept, full1, full2, ones)
    checks = 0
    for what, got, want in [("out", out, ref_out[me]), ("x.grad", x.grad, ref_x[me]),
                            ("weights.grad", wt.grad, ref_w[me]),
                            ("w1.grad", layer.w1.grad, ref_w1[mine]),
                            ("w2.grad", layer.w2.grad, ref_w2[mine])]:
        assert got is not None and got.shape == want.shape, what
        torch.testing.assert_close(got.cpu().double(), want, rtol=1e-4, atol=1e-4,
                                   msg=f"rank {me} tokens {tokens}: {what}")
        checks += 1
    return checks


@pytest.mark.parametrize("tokens", [[0, 3], [0, 0, 4], [0, 0]], ids=["rank0", "two", "none"])
def test_ranks_without_tokens_train_on_a_sum(tokens, backend):
    got = ditron.launch(_zero_tokens_case, len(tokens), tokens, backend=backend)
    assert got == [5] * len(tokens)
