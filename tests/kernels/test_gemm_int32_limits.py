"""The persistent and grouped GEMMs at the int32 limits of their offsets and coordinates.

A K step ``BLOCK_K * stride`` wrapped in int32 for K strides from ``2**31 / BLOCK_K`` on (a
column-major operand of that many rows), in the persistent GEMM's int64 mode (``WIDE``) and
in the grouped GEMM; the grouped GEMMs numbered rows in int32 (a block past row 2**31 - 1
wrapped to a negative one), and their TMA coordinates ``group * K + k`` too; the persistent
GEMM took TMA loads for rows or K from 2**31 on, whose int64 coordinates do not compile.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import textwrap

import pytest
import torch

import ditron  # noqa: F401  (before anything imports triton: it arranges the interpreter)
from ditron.kernels import grouped_gemm as gg
from ditron.kernels.gemm import GemmConfig, gemm_launch

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

#: the child process: operands whose K stride is ``S`` elements, on a sparse file mapping
_K_STEPS = textwrap.dedent("""
    import os, sys
    import torch
    import ditron
    from ditron.kernels.gemm import GemmConfig, cached_linear_order, launch_gemm
    from ditron.kernels.grouped_gemm import GroupedGemmConfig, grouped_gemm

    S = 2**27  # the K stride: 16 * S = 2**31, 32 * S = 2**32
    K = 64
    path = sys.argv[1]
    size = (K - 1) * S + 256
    with open(path, "wb") as f:
        f.truncate(2 * size)
    store = torch.from_file(path, shared=True, size=size, dtype=torch.float16)
    os.unlink(path)
    g = torch.Generator().manual_seed(int(sys.argv[2]))
    small = lambda *shape: torch.randint(-3, 4, shape, generator=g).half()  # exact sums
    # the persistent GEMM, 16 x 16 x 16 blocks (its K step is 2**31 elements): a and b
    # column-major and row-major with a K stride of S
    a, b = store.as_strided((16, 32), (1, S), 0), store.as_strided((32, 8), (S, 1), 64)
    a.copy_(small(16, 32))
    b.copy_(small(32, 8))
    cfg = GemmConfig(block_m=16, block_n=16, block_k=16, group_m=1, num_warps=1,
                     num_stages=1, programs=1)
    c = torch.full((16, 8), float("nan"), dtype=torch.float16)
    launch_gemm(a, b, c, 16, order=cached_linear_order(16, 8, cfg, c.device), seg_rows=16,
                cfg=cfg)
    ok = torch.equal(c.float(), a.float() @ b.float())
    # the grouped GEMM, 32-deep K blocks (its K step is 2**32 elements): x and w with K
    # stride S, two groups
    x = store.as_strided((16, K), (1, S), 128)
    w = store.as_strided((2, K, 4), (4, S, 1), 192)
    x.copy_(small(16, K))
    w.copy_(small(2, K, 4))
    offsets = torch.tensor([0, 5, 16])
    cfg = GroupedGemmConfig(16, 16, 32, num_warps=1, num_stages=1, tma=False)
    out = grouped_gemm(x, w, offsets, config=cfg)
    want = torch.cat([x[:5].float() @ w[0].float(), x[5:].float() @ w[1].float()])
    print(ok, torch.equal(out.float(), want))
""")


def test_k_strides_past_int32_over_block_k():
    """Before: the persistent GEMM's second K block was read 2**31 elements before its
    operands (a crash here), the grouped GEMM read its first K block twice (wrong sums).
    Run on a sparse mapping (a few pages touched) in a child process, so that a crash
    fails this test alone."""
    env = dict(os.environ, TRITON_INTERPRET="1")
    seed = str(int(torch.randint(0, 2**20, (1,))))
    with tempfile.TemporaryDirectory() as tmp:
        proc = subprocess.run([sys.executable, "-c", _K_STEPS, os.path.join(tmp, "sparse"),
                               seed], env=env, capture_output=True, text=True, timeout=300,
                              cwd=ROOT)
    assert proc.returncode == 0, f"exit {proc.returncode}: {proc.stderr[-2000:]}"
    assert proc.stdout.split()[-2:] == ["True", "True"], proc.stdout


def _grouped_operands(rows: int, groups: int = 2):
    """``x [rows, 16]``, ``w [groups, 16, 16]`` and offsets on the meta device (nothing
    allocated: the refusal must come first)."""
    x = torch.empty(1, 16, device="meta", dtype=torch.float16).expand(rows, 16)
    w = torch.empty(groups, 16, 16, device="meta", dtype=torch.float16)
    return x, w, torch.empty(groups + 1, dtype=torch.int64, device="meta")


def test_grouped_gemms_refuse_rows_that_int32_cannot_number():
    # the CPU configs' row blocks: 64 rows (forward), 32 (weight gradient: block_k)
    x, w, offsets = _grouped_operands(2**31 - 64 + 1)
    with pytest.raises(ValueError, match=r"grouped_gemm: x has 2147483585 rows; the kernels "
                                         r"number rows in int32 and take blocks of 64, so at "
                                         r"most 2147483584"):
        gg.grouped_gemm(x, w, offsets)
    x = x[:1].expand(2**31 - 32 + 1, 16)
    with pytest.raises(ValueError, match=r"grouped_gemm_wgrad: x has 2147483617 rows; .* "
                                         r"blocks of 32, so at most 2147483616"):
        gg.grouped_gemm_wgrad(x, x, offsets)
    gg.check_rows("grouped_gemm", 2**31 - 64, 64)  # the last block ends at row 2**31 - 1


def test_grouped_tma_coordinates_stay_int32():
    cfg = gg.GroupedGemmConfig(64, 64, 32, num_warps=4, num_stages=1)
    x = torch.empty(128, 64, device="meta", dtype=torch.bfloat16)
    for groups, described in ((2**31 // 64, True), (2**31 // 64 + 1, False)):
        w = torch.empty_strided((groups, 64, 64), (64 * 64, 64, 1), device="meta",
                                dtype=torch.bfloat16)  # stacked [G * K, N]
        wt = torch.empty_strided((groups, 64, 64), (64 * 64, 1, 64), device="meta",
                                 dtype=torch.bfloat16)  # transposed, stacked [G * N, K]
        assert (gg._descriptors(x, w, cfg) is not None) == described
        assert (gg._descriptors(x, wt, cfg) is not None) == described


@pytest.mark.parametrize("M, K, tma", [(2**20, 64, True), (2**31, 64, False),
                                       (64, 2**31, False)])
def test_gemm_takes_tma_only_with_int32_coordinates(M, K, tma):
    """Rows or K from 2**31 on are int64 in the kernel, and Triton refuses int64
    coordinates of a descriptor load ("Block pointers only support 32 bit offsets", on
    the GPU only): those take the pointer path."""
    cfg = GemmConfig(block_m=16, block_n=32, block_k=16, group_m=1, num_warps=1,
                     num_stages=1, programs=1)
    a = torch.empty_strided((M, K), (K, 1), device="meta", dtype=torch.bfloat16)
    b = torch.empty(K, 32, device="meta", dtype=torch.bfloat16)
    c = torch.empty_strided((M, 32), (32, 1), device="meta", dtype=torch.bfloat16)
    order = torch.zeros(1, dtype=torch.int32, device="meta")
    kwargs = gemm_launch(a, b, c, M, order=order, seg_rows=M, cfg=cfg, use_tma=True)[2]
    assert kwargs["USE_TMA"] is tma
