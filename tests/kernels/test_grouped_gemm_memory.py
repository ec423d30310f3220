"""What the grouped GEMMs (``kernels/grouped_gemm.py``) allocate: nothing of ``dw``'s size
beside an ``out`` the caller gives (the weight gradient of many experts is the largest
tensor of an MoE layer's backward)."""

from __future__ import annotations

import pytest
import torch
from torch.profiler import ProfilerActivity, profile

import ditron  # noqa: F401  (before anything imports triton: it arranges the interpreter)
from ditron.kernels.grouped_gemm import GroupedGemmConfig, grouped_gemm_wgrad

CFG = GroupedGemmConfig(16, 16, 16, num_warps=1, num_stages=1, group_m=2)


def test_wgrad_into_a_given_out_allocates_no_dw():
    """Before, the shape check built a ``[G, K, N]`` weight with ``new_empty``: a second
    ``dw`` allocated beside the given ``out`` (on a GPU, a full gradient's memory)."""
    g = torch.Generator().manual_seed(int(torch.randint(0, 2**20, (1,))))
    G, K, N, R = 64, 16, 16, 5
    x, dy = torch.randn(R, K, generator=g), torch.randn(R, N, generator=g)
    offsets = torch.tensor([0] * (G - 1) + [2, R])  # two groups of rows, the rest empty
    out = torch.full((G, K, N), float("nan"))
    grouped_gemm_wgrad(x, dy, offsets, out=out, config=CFG)  # compiled, cached
    out.fill_(float("nan"))
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        grouped_gemm_wgrad(x, dy, offsets, out=out, config=CFG)
    big = [(e.name, e.cpu_memory_usage) for e in prof.events()
           if e.cpu_memory_usage >= out.numel() * out.element_size()]
    assert not big, f"allocated dw's size or more: {big}"
    torch.testing.assert_close(out[G - 2], x[:2].t() @ dy[:2])
    torch.testing.assert_close(out[G - 1], x[2:].t() @ dy[2:])
    assert out[:G - 2].eq(0).all()


def test_wgrad_names_dy_when_it_does_not_fit_x():
    x, offsets = torch.randn(5, 16), torch.tensor([0, 2, 5])
    for dy in (torch.randn(5, 16).half(), torch.randn(5, 16, device="meta")):
        with pytest.raises(ValueError, match="grouped_gemm_wgrad: dy must be torch.float32 on "
                                             "cpu"):
            grouped_gemm_wgrad(x, dy, offsets, config=CFG)
