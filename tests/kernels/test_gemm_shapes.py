"""The persistent GEMM (``kernels/gemm.py``) and the grouped GEMM on odd shapes, strides and
tile orders, against torch on fresh random inputs, outputs poisoned (NaN-filled
``torch.empty``, ``poisoned`` in conftest.py); and the swizzle orders as permutations."""

from __future__ import annotations

import os
import random
import subprocess
import sys
import textwrap

import pytest
import torch

import ditron  # noqa: F401  (before anything imports triton: it arranges the interpreter)
from ditron.kernels import swizzle
from ditron.kernels.gemm import GemmConfig, matmul

CFG = GemmConfig(block_m=16, block_n=16, block_k=16, group_m=2, num_warps=1, num_stages=1,
                 programs=1)


def _operand(rows: int, cols: int, layout: str, dtype: torch.dtype) -> torch.Tensor:
    """A ``[rows, cols]`` operand: row-major, a transposed column-major one, a slice with
    gaps between rows and columns, or one row broadcast (row stride 0)."""
    if layout == "t":
        t = torch.randn(cols, rows).t()
    elif layout == "slice":
        t = torch.randn(rows + 2, 2 * cols + 3)[1:-1, 3::2]
    elif layout == "bcast":
        t = torch.randn(1, cols).expand(rows, cols)
    else:
        t = torch.randn(rows, cols)
    return t.to(dtype)


@pytest.mark.usefixtures("poisoned")
@pytest.mark.parametrize("M,N,K", [(1, 1, 1), (1, 17, 3), (17, 1, 5), (31, 33, 37),
                                   (7, 13, 0), (3, 2, 129)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_matmul_odd_shapes_and_strides(M, N, K, dtype):
    tol = 1e-5 if dtype == torch.float32 else 1e-2
    for la, lb in (("rm", "rm"), ("t", "t"), ("slice", "bcast"), ("bcast", "slice")):
        a, b = _operand(M, K, la, dtype), _operand(K, N, lb, dtype)
        for cfg in (None, CFG):
            got = matmul(a, b, cfg=cfg)
            want = (a.float() @ b.float()).to(dtype)
            torch.testing.assert_close(got.float(), want.float(), atol=tol * max(1, K) ** 0.5,
                                       rtol=tol)


#: elements of the store the wide views lie in: row or column 2 of each view, 2**30
#: elements apart, starts past 2**31
WIDE_STORE = 2**31 + 4096


def check_wide_offsets(store: torch.Tensor) -> str:
    """The persistent GEMM and the grouped GEMMs on views of ``store`` (fp16,
    ``WIDE_STORE`` elements) whose rows or columns are 2**30 elements apart; raises on a
    wrong result, returns ``"ok"``."""
    from ditron.kernels.gemm import cached_linear_order, default_config, launch_gemm
    from ditron.kernels.grouped_gemm import (
        GroupedGemmConfig,
        grouped_gemm,
        grouped_gemm_wgrad,
    )

    far, dev = 2**30, store.device

    def view(shape, stride, offset):
        t = store.as_strided(shape, stride, offset)
        t.copy_(torch.randn(shape).half())
        return t

    def close(got, want, what):
        err = (got.float() - want.float()).abs().max().item()
        assert err < 2e-2, f"{what}: error {err}"

    # the persistent GEMM: A's rows, B's columns and C's rows 2**30 elements apart
    a, b = view((3, 16), (far, 1), 0), view((16, 3), (1, far), 32)
    c = store.as_strided((3, 3), (far, 1), 16).fill_(float("nan"))
    cfg = default_config(c.device, c.dtype)
    launch_gemm(a, b, c, 3, order=cached_linear_order(3, 3, cfg, c.device), seg_rows=3,
                cfg=cfg)
    close(c, a.float() @ b.float(), "launch_gemm")
    close(matmul(a, b), a.float() @ b.float(), "matmul")
    # the grouped GEMM: w's and out's columns far apart; its weight gradient: x's, dy's
    # columns and dw's rows
    gcfg = GroupedGemmConfig(16, 16, 16, num_warps=1, num_stages=1)
    x, offsets = torch.randn(5, 16).half().to(dev), torch.tensor([0, 2, 5], device=dev)
    w = view((2, 16, 3), (16, 1, far), 64)
    out = store.as_strided((5, 3), (1, far), 128).fill_(float("nan"))
    grouped_gemm(x, w, offsets, out=out, config=gcfg)
    close(out[:2], x[:2].float() @ w[0].float(), "grouped_gemm 0")
    close(out[2:], x[2:].float() @ w[1].float(), "grouped_gemm 1")
    xs, dy = view((5, 3), (1, far), 256), view((5, 3), (1, far), 1024)
    dw = store.as_strided((2, 3, 3), (3, far, 1), 512).fill_(float("nan"))
    grouped_gemm_wgrad(xs, dy, offsets, out=dw, config=gcfg)
    close(dw[0], xs[:2].float().t() @ dy[:2].float(), "wgrad 0")
    close(dw[1], xs[2:].float().t() @ dy[2:].float(), "wgrad 1")
    return "ok"


#: the CPU check in a child process, on a sparse file mapping (a few pages touched)
_WIDE = textwrap.dedent("""
    import os, sys
    import torch
    import ditron
    from tests.kernels.test_gemm_shapes import WIDE_STORE, check_wide_offsets

    path = sys.argv[1]
    with open(path, "wb") as f:
        f.truncate(2 * WIDE_STORE)
    store = torch.from_file(path, shared=True, size=WIDE_STORE, dtype=torch.float16)
    os.unlink(path)
    print(check_wide_offsets(store))
""")


def test_offsets_past_int32_do_not_wrap(tmp_path):
    """Operands spanning more than 2**31 elements (strided views of a sparse mapping, a few
    pages touched). Before, the persistent GEMM's ``row * stride`` offsets and the grouped
    GEMM's column offsets were int32 products that wrapped: the CPU interpreter read below
    the tensor and crashed (SIGSEGV), a GPU would read or write the wrong memory. Run in a
    child process so that a crash fails this test alone."""
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env = dict(os.environ, TRITON_INTERPRET="1")
    proc = subprocess.run([sys.executable, "-c", _WIDE, str(tmp_path / "sparse")], env=env,
                          capture_output=True, text=True, timeout=300, cwd=root)
    assert proc.returncode == 0 and proc.stdout.strip().endswith("ok"), (
        f"exit {proc.returncode}: {proc.stderr[-2000:]}")


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_offsets_past_int32_do_not_wrap_gpu():
    """The same views on a GPU: a 4 GiB store, compiled kernels (``WIDE`` in the
    persistent GEMM, the grouped GEMMs' int64 column offsets)."""
    store = torch.zeros(WIDE_STORE, dtype=torch.float16, device="cuda")
    assert check_wide_offsets(store) == "ok"
    torch.cuda.synchronize()


def test_swizzle_orders_are_permutations():
    """Every order visits each tile of a block of rows (segment >= 0) exactly once, for
    world sizes 1-5, any segment layout, arrival order and group size; the scatter order
    puts every peer tile before every own tile."""
    rng = random.Random(5)
    for _ in range(400):
        W, m_blocks, n_blocks = rng.randint(1, 5), rng.randint(0, 9), rng.randint(0, 5)
        group_m, rank = rng.randint(1, 9), rng.randrange(W)
        seg = [rng.randrange(-1, W) for _ in range(m_blocks)]
        if rng.random() < 0.5:
            seg.sort()
        arrival = rng.sample(range(W), rng.randint(0, W)) if rng.random() < 0.5 else None
        tiles = sorted(mb * n_blocks + nb for mb in range(m_blocks) if seg[mb] >= 0
                       for nb in range(n_blocks))
        g = swizzle.gather_order(seg, n_blocks, rank, W, arrival, group_m).tolist()
        s = swizzle.scatter_order(seg, n_blocks, rank, W, group_m).tolist()
        assert sorted(g) == tiles and sorted(s) == tiles
        own = [seg[t // n_blocks] == rank for t in s]
        assert own == sorted(own)  # peers' tiles first
        assert sorted(swizzle.linear_order(m_blocks, n_blocks, group_m).tolist()) == list(
            range(m_blocks * n_blocks))


@pytest.mark.parametrize("rank", [-1, 2])
def test_swizzle_refuses_a_rank_outside_the_world(rank):
    """Before, rank 2 of 2 gave a gather order without segment 0's tiles, rank -1 a
    scatter order without segment 1's: tiles never computed, silently."""
    for order in (swizzle.gather_order, swizzle.scatter_order):
        with pytest.raises(ValueError, match=r"rank must lie in \[0, 2\)"):
            order([0, 1, 1], 2, rank, 2)
