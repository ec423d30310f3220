"""The TMA (tensor-descriptor) load path of the persistent GEMM, on the CPU interpreter.

``use_tma=True`` (or ``DITRON_GEMM_TMA=1``) selects the descriptor path on the CPU backend;
each case checks that the path was really taken (or refused: fp32 with B = w.t() loads
through pointers) and compares with torch on shapes that do not divide the tiles, fp32 and
bf16, B row-major and B = w.t().
"""

from __future__ import annotations

import pytest
import torch

import ditron  # before anything imports triton: it arranges the interpreter
from ditron.kernels import gemm
from ditron.kernels.gemm import GemmConfig, GemmHooks, launch_gemm, matmul, slot_waits
from ditron.kernels.swizzle import linear_order

CFG = GemmConfig(block_m=16, block_n=32, block_k=16, group_m=4, num_warps=1, num_stages=1,
                 programs=1)
TOL = {torch.float32: 1e-5, torch.bfloat16: 1e-2}


def _operands(M, N, K, dtype, transposed, seed):
    g = torch.Generator().manual_seed(seed)
    a = torch.randn(M, K, generator=g).to(dtype)
    if transposed:
        b = torch.randn(N, K, generator=g).to(dtype).t()  # the weight layout: b = w.t()
    else:
        b = torch.randn(K, N, generator=g).to(dtype)
    return a, b


def _check(got, ref, dtype):
    assert torch.isfinite(got.double()).all(), "unwritten or non-finite elements"
    err = (got.double() - ref).abs().max().item()
    assert err <= TOL[dtype] * ref.abs().max().item(), f"max error {err}"


@pytest.fixture
def tma_calls(monkeypatch):
    """Records the result of every ``tma_operands`` call (None: pointer path)."""
    calls = []
    real = gemm.tma_operands

    def spy(*args, **kw):
        out = real(*args, **kw)
        calls.append(None if out is None else out[2])
        return out

    monkeypatch.setattr(gemm, "tma_operands", spy)
    return calls


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("transposed", [False, True])
def test_matmul_tma_matches_torch(dtype, transposed, tma_calls):
    M, N, K = 37, 72, 40  # no dimension is a multiple of its block
    a, b = _operands(M, N, K, dtype, transposed, seed=int(transposed) + 7)
    c = matmul(a, b, CFG, use_tma=True)
    # a transposed fp32 B takes the pointer path (descriptors.transposable)
    want = None if transposed and dtype == torch.float32 else transposed
    assert tma_calls == [want], "TMA path not taken (or wrong B layout)"
    _check(c, a.double() @ b.double(), dtype)


def test_env_selects_tma_and_zero_disables(monkeypatch, tma_calls):
    a, b = _operands(20, 40, 24, torch.bfloat16, True, seed=3)
    monkeypatch.setenv("DITRON_GEMM_TMA", "1")
    _check(matmul(a, b, CFG), a.double() @ b.double(), torch.bfloat16)
    monkeypatch.setenv("DITRON_GEMM_TMA", "0")
    _check(matmul(a, b, CFG), a.double() @ b.double(), torch.bfloat16)
    assert tma_calls == [True], "DITRON_GEMM_TMA=1 must take the TMA path, =0 must not"


def test_unaligned_operands_fall_back(tma_calls):
    # fp32 rows of 13 elements (52 bytes) break the 16-byte stride rule: pointer path
    a, b = _operands(19, 21, 13, torch.float32, False, seed=5)
    c = matmul(a, b, CFG, use_tma=True)
    assert tma_calls == [None]
    _check(c, a.double() @ b.double(), torch.float32)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_segments_wait_prologue_and_trace(dtype, tma_calls):
    """Segments of 21 rows (row offsets 0, 16, 21, 37, ...), the WAIT prologue on signals
    that have already arrived, and the trace hook, all with TMA loads."""
    W, seg, N, K = 3, 21, 52, 48
    M = W * seg
    a, b = _operands(M, N, K, dtype, dtype == torch.bfloat16, seed=11)
    blocks_per_seg = -(-seg // CFG.block_m)
    m_blocks = W * blocks_per_seg
    n_blocks = -(-N // CFG.block_n)
    order = linear_order(m_blocks, n_blocks, CFG.group_m)
    chunk = torch.arange(m_blocks, dtype=torch.int32) // blocks_per_seg  # a chunk per segment
    sig = torch.full((W,), 5, dtype=torch.int64)
    hooks = GemmHooks(waits=slot_waits(order, chunk, chunk, n_blocks), wait_sig=sig,
                      wait_target=5,
                      trace=torch.zeros(1 + gemm.TRACE_FIELDS * order.numel(),
                                        dtype=torch.int64))
    c = torch.full((M, N), float("nan"), dtype=dtype)
    launch_gemm(a, b, c, M, order=order, seg_rows=seg, cfg=CFG, hooks=hooks,
                ctx=gemm._local_context(c.device), use_tma=True)
    assert tma_calls == [dtype == torch.bfloat16]
    _check(c, a.double() @ b.double(), dtype)
    tr = hooks.trace[1:].view(-1, gemm.TRACE_FIELDS)
    assert sorted(tr[:, 0].tolist()) == list(range(order.numel())), "trace misses tiles"
    assert (tr[:, 1] < tr[:, 2]).all() and (tr[:, 2] < tr[:, 3]).all() \
        and (tr[:, 3] < tr[:, 4]).all(), "trace out of order"


def _scatter_case(m, K, N):
    torch.manual_seed(3 + ditron.world().rank)
    W = ditron.world().world_size
    out = []
    for dtype in (torch.float32, torch.bfloat16):
        a = torch.randn(W * m, K).to(dtype)
        b = torch.randn(N, K).to(dtype).t()
        full = a.double() @ b.double()
        parts = [torch.empty_like(full) for _ in range(W)]
        torch.distributed.all_gather(parts, full)
        total = sum(parts)
        rs = ditron.ops.gemm_rs(a, b, method="overlap")
        ar = ditron.ops.gemm_ar(a, b, method="overlap")
        r = ditron.world().rank
        for got, ref in ((rs, total[r * m:(r + 1) * m]), (ar, total)):
            err = (got.double() - ref).abs().max().item()
            out.append(err <= TOL[dtype] * 4 * ref.abs().max().item())
    return all(out)


def test_gemm_rs_and_ar_with_tma_two_ranks(monkeypatch):
    monkeypatch.setenv("DITRON_GEMM_TMA", "1")
    monkeypatch.setenv("DITRON_GEMM_BLOCKS", "16x32x16")
    assert ditron.launch(_scatter_case, 2, 19, 32, 40, backend="cpu") == [True, True]


def test_tables_on_another_device_raise_before_the_kernel():
    """The kernel reads the tile order and the wait tables: one left on another device
    (a CPU table beside CUDA operands, the usual slip; here ``meta`` beside the CPU's) is
    refused by name instead of failing inside Triton's launcher."""
    a, b = _operands(37, 72, 40, torch.float32, False, seed=3)
    c = torch.full((37, 72), float("nan"))
    order = linear_order(3, 3, CFG.group_m)
    meta = order.to("meta")
    sig = torch.zeros(3, dtype=torch.int64)
    cases = {"order": (meta, None),
             "hooks.waits": (order, GemmHooks(waits=order.long().to("meta"), wait_sig=sig))}
    for name, (tiles, hooks) in cases.items():
        with pytest.raises(ValueError, match=f"{name} is on meta, c on cpu"):
            launch_gemm(a, b, c, 37, order=tiles, seg_rows=37, cfg=CFG, hooks=hooks)
    assert c.isnan().all()
    launch_gemm(a, b, c, 37, order=order, seg_rows=37, cfg=CFG)  # the same call, all on cpu
    _check(c, a.double() @ b.double(), torch.float32)


def test_matmul_refuses_operands_it_would_multiply_at_another_precision():
    """Mixed dtypes (torch.matmul refuses them) and float64 / integer operands (the GEMM
    multiplies in fp32 at best: float64 came back with fp32 errors) are refused."""
    a, b = torch.randn(8, 16), torch.randn(16, 8)
    for x, y in ((a, b.bfloat16()), (a.double(), b.double()), (a.long(), b.long())):
        with pytest.raises(ValueError, match="must share a dtype among float16, bfloat16"):
            matmul(x, y, CFG)
    _check(matmul(a, b, CFG), a.double() @ b.double(), torch.float32)
