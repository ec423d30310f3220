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
