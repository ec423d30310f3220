"""The tables and operands the persistent GEMM (``kernels/gemm.py``) reads by address: the
tile order and the wait table (slot ``i`` at element ``i``), and ``a`` / ``b`` beside ``c``.
What it cannot read as given is refused before the launch; outputs poisoned (``poisoned``,
conftest.py), references from torch on fresh random inputs."""

from __future__ import annotations

import pytest
import torch

import ditron  # noqa: F401  (before anything imports triton: it arranges the interpreter)
from ditron.kernels.gemm import GemmConfig, GemmHooks, cached_linear_order, launch_gemm, matmul

CFG = GemmConfig(block_m=16, block_n=16, block_k=16, group_m=2, num_warps=1, num_stages=1,
                 programs=1)
M, N, K = 37, 45, 20


def _operands(seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(M, K, generator=g), torch.randn(K, N, generator=g)


@pytest.mark.usefixtures("poisoned")
def test_matmul_reads_a_strided_order_by_value():
    """Before, the kernel read slot ``i`` of an order view at element ``i`` of its storage:
    every other id of this one was 1000 (no tile), and 433 of the 1665 outputs were never
    written."""
    a, b = _operands(int(torch.randint(0, 2**20, (1,))))
    order = cached_linear_order(M, N, CFG, a.device).flip(0)
    strided = torch.stack([order, torch.full_like(order, 1000)], 1)[:, 0]
    assert not strided.is_contiguous() and strided.tolist() == order.tolist()
    torch.testing.assert_close(matmul(a, b, CFG, order=strided), a @ b)
    torch.testing.assert_close(matmul(a, b, CFG, order=order.long()), a @ b)


def test_matmul_refuses_an_order_that_is_not_a_permutation():
    """An order of the right length that repeats a tile (leaving another unwritten) or
    names a tile outside the output (none written there) was launched."""
    a, b = _operands(int(torch.randint(0, 2**20, (1,))))
    order = cached_linear_order(M, N, CFG, a.device)
    repeated, outside = order.clone(), order.clone()
    repeated[1] = repeated[0]
    outside[2] = order.numel()
    for bad in (repeated, outside):
        with pytest.raises(ValueError, match="order must list each of the 9 tiles of 16 x 16 "
                                             "once, got 9 ids: "):
            matmul(a, b, CFG, order=bad)


def test_launch_gemm_refuses_tables_it_cannot_read_as_given():
    """A strided order or wait table, a float or 2-D order: before, the first two were read
    by element (wrong tiles, others never written), a float order failed inside the
    interpreter (and would not compile on a GPU)."""
    a, b = _operands(int(torch.randint(0, 2**20, (1,))))
    c = torch.full((M, N), float("nan"))
    order = cached_linear_order(M, N, CFG, a.device)
    sig = torch.zeros(1, dtype=torch.int64)
    waits = torch.zeros(2 * order.numel(), dtype=torch.int64)[::2]  # lo 0, hi 0: chunk 0
    cases = {"order": (torch.stack([order, order], 1)[:, 0], None),
             "order must be a contiguous 1-D int32 or int64 tensor, got torch.float32":
                 (order.float(), None),
             "order must be a contiguous 1-D int32 or int64 tensor, got torch.int32 \\(3, 3\\)":
                 (order.view(3, 3), None),
             "hooks.waits": (order, GemmHooks(waits=waits, wait_sig=sig, wait_target=1))}
    for message, (tiles, hooks) in cases.items():
        with pytest.raises(ValueError, match=message):
            launch_gemm(a, b, c, M, order=tiles, seg_rows=M, cfg=CFG, hooks=hooks)
    assert c.isnan().all()


@pytest.mark.parametrize("name", ["a", "b"])
def test_launch_gemm_refuses_operands_on_another_device(name):
    """An operand off ``c``'s device (a CPU weight beside CUDA activations, the usual slip;
    here ``meta`` beside the CPU's) is refused by name. Before, it reached the kernel: the
    interpreter failed on the meta tensor; on a GPU, a launch whose key was seen before
    (``FastKernel``) skips Triton's pointer checks and reads the host address."""
    a, b = _operands(int(torch.randint(0, 2**20, (1,))))
    c = torch.full((M, N), float("nan"))
    order = cached_linear_order(M, N, CFG, a.device)
    launch_gemm(a, b, c, M, order=order, seg_rows=M, cfg=CFG)  # the key, seen once
    torch.testing.assert_close(c, a @ b)
    c.fill_(float("nan"))
    args = {"a": a, "b": b}
    args[name] = args[name].to("meta")
    with pytest.raises(ValueError, match=f"launch_gemm: {name} is on meta, c on cpu"):
        launch_gemm(args["a"], args["b"], c, M, order=order, seg_rows=M, cfg=CFG)
    assert c.isnan().all()


def test_launch_over_zero_rows_with_tma_loads_writes_nothing():
    """``M = 0`` with tiles in the order (a launch the caller sizes itself) on the TMA path:
    before, C's descriptor was built on ``[0, N]`` and Triton's assertion ("shape must be
    positive") came out of the launch."""
    a, b = _operands(int(torch.randint(0, 2**20, (1,))))
    cfg = GemmConfig(block_m=16, block_n=16, block_k=16, group_m=2, num_warps=1,
                     num_stages=1, programs=1, tma_store=True)
    a, b = a[:32, :16].contiguous(), b[:16, :32].contiguous()
    c = torch.full((32, 32), float("nan"))
    order = cached_linear_order(32, 32, cfg, a.device)
    launch_gemm(a, b, c, 0, order=order, seg_rows=32, cfg=cfg, use_tma=True)
    assert c.isnan().all()
    launch_gemm(a, b, c, 32, order=order, seg_rows=32, cfg=cfg, use_tma=True)
    torch.testing.assert_close(c, a @ b)
