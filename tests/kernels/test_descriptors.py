"""Which operands the host TMA descriptors take (``kernels/descriptors.py``), and that an
operand refused there still multiplies right through the GEMMs' pointer path."""

from __future__ import annotations

import torch

import ditron  # noqa: F401  (before triton: it arranges the interpreter)
from ditron.kernels.descriptors import describe, fits
from ditron.kernels.gemm import GemmConfig, matmul

BF16 = torch.bfloat16
CFG = GemmConfig(block_m=16, block_n=32, block_k=16, group_m=4, num_warps=1, num_stages=1,
                 programs=1)


def test_fits_takes_aligned_row_major_views():
    x = torch.empty(40, 64, dtype=BF16)
    assert fits(x, 32) and fits(x[:, :32], 32) and fits(x[8:], 32)
    assert describe(x, (16, 32))[1] is False
    assert describe(torch.empty(64, 40, dtype=BF16).t(), (16, 32))[1] is True  # a weight
    assert not fits(x[:, 1:33], 32)  # base 2 bytes in
    assert not fits(torch.empty(40, 60, dtype=BF16), 32)  # 120-byte rows
    assert not fits(x[:, ::2], 32)  # no unit stride
    assert not fits(x[:0], 32)  # empty


def test_fits_refuses_rows_that_overlap():
    """A broadcast operand (``expand``: row stride 0) or rows closer than their length are
    not the layout a tensor map describes (each row stride spans the row before it); they
    were described, row stride 0 included, since 0 is a multiple of 16 bytes."""
    row = torch.randn(1, 64, dtype=BF16)
    for t in (row.expand(40, 64), row.as_strided((1, 64), (0, 1)),
              torch.randn(4096, dtype=BF16).as_strided((40, 64), (8, 1))):
        assert not fits(t, 32), t.stride()
        assert describe(t, (16, 32)) is None, t.stride()
        assert describe(t.t(), (32, 16)) is None, t.stride()


def test_gemm_with_a_broadcast_operand_matches_torch():
    """``use_tma=True`` with an expanded ``b`` (or ``a``) reads it through pointers."""
    g = torch.Generator().manual_seed(int(torch.randint(0, 2**20, (1,))))
    M, N, K = 37, 72, 40
    a = torch.randn(M, K, generator=g)
    b = torch.randn(1, N, generator=g).expand(K, N)
    for x, y in ((a, b), (torch.randn(1, K, generator=g).expand(M, K), b.contiguous())):
        got = matmul(x, y, CFG, use_tma=True)
        torch.testing.assert_close(got, x @ y, rtol=1e-5, atol=1e-5)
