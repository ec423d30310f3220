"""The grouped GEMM and its weight gradient (``kernels/grouped_gemm.py``) on the CPU
interpreter, against per-group torch matmuls."""

from __future__ import annotations

import pytest
import torch

import ditron  # noqa: F401  (before anything imports triton: it arranges the interpreter)
from ditron.kernels.grouped_gemm import GroupedGemmConfig, grouped_gemm, grouped_gemm_wgrad

CFG = GroupedGemmConfig(16, 16, 16, num_warps=1, num_stages=1, group_m=2)


@pytest.mark.usefixtures("poisoned")
def test_grouped_gemm_reads_offsets_of_any_stride():
    """Offsets taken as a strided view (every other element of a bigger tensor) are read
    as the values the view holds, not as the memory that follows its first one."""
    g = torch.Generator().manual_seed(11)
    bounds = [0, 7, 7, 20]
    x, w = torch.randn(20, 24, generator=g), torch.randn(3, 24, 18, generator=g)
    dy = torch.randn(20, 18, generator=g)
    offsets = torch.tensor([[o, 5] for o in bounds]).reshape(-1)[::2]
    assert not offsets.is_contiguous() and offsets.tolist() == bounds
    out = grouped_gemm(x, w, offsets, config=CFG)
    dw = grouped_gemm_wgrad(x, dy, offsets, config=CFG)
    for e in range(3):
        rows = slice(bounds[e], bounds[e + 1])
        torch.testing.assert_close(out[rows], x[rows] @ w[e], rtol=1e-5, atol=1e-4)
        torch.testing.assert_close(dw[e], x[rows].t() @ dy[rows], rtol=1e-5, atol=1e-4)



def test_outs_that_overlap_operands_or_themselves_are_refused():
    """An ``out`` over an operand's memory (tiles would read rows other tiles already
    wrote) or with elements sharing memory (racing writes) is refused with a ValueError
    before the kernel runs, which leaves the operands untouched."""
    g = torch.Generator().manual_seed(12)
    R, K, N, G = 12, 16, 16, 2
    offsets = torch.tensor([0, 5, R])
    buf = torch.randn(R * K + G * K * N, generator=g)  # x, then room for a [G, K, N] out
    x, w = buf[:R * K].view(R, K), torch.randn(G, K, N, generator=g)
    dy = torch.randn(R, N, generator=g)
    before = buf.clone(), w.clone(), dy.clone()
    for out, what in ((x[:, :N], "overlaps x"), (w[0, :R], "overlaps w"),
                      (torch.zeros(1, N).expand(R, N), "share memory")):
        with pytest.raises(ValueError, match=what):
            grouped_gemm(x, w, offsets, out=out, config=CFG)
    for out, what in ((buf[R * K - 1:R * K - 1 + G * K * N].view(G, K, N), "overlaps x"),
                      (torch.zeros(1, 1, 1).expand(G, K, N), "share memory")):
        with pytest.raises(ValueError, match=what):
            grouped_gemm_wgrad(x, dy, offsets, out=out, config=CFG)
    for t, b in zip((buf, w, dy), before, strict=True):
        assert torch.equal(t, b)
    out, dw = torch.full((R, N), float("nan")), buf[R * K:].view(G, K, N)  # next to x: apart
    grouped_gemm(x, w, offsets, out=out, config=CFG)
    both = torch.full((R, 2 * N), float("nan"))  # interleaved with an operand: apart too
    xs = both[:, 1::2].copy_(x[:, :N])
    grouped_gemm(xs, w[:, :N], offsets, out=both[:, ::2], config=CFG)
    torch.testing.assert_close(both[5:, ::2], xs[5:] @ w[1, :N], rtol=1e-5, atol=1e-4)
    grouped_gemm_wgrad(x, dy, offsets, out=dw, config=CFG)
    torch.testing.assert_close(out[5:], x[5:] @ w[1], rtol=1e-5, atol=1e-4)
    torch.testing.assert_close(dw[1], x[5:].t() @ dy[5:], rtol=1e-5, atol=1e-4)
