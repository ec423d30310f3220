"""Host checks of the local kernels before they launch: the persistent GEMM
(``kernels/gemm.py``) refuses an output that overlaps itself or an operand and tables that
name tiles or chunks it does not have; the gather-sum and gather-dot
(``kernels/gather_sum.py``) compute float64 rows in float64. References from torch on
fresh random inputs; outputs poisoned (``poisoned``, conftest.py)."""

from __future__ import annotations

import pytest
import torch

import ditron  # noqa: F401  (before anything imports triton: it arranges the interpreter)
from ditron.kernels import gemm
from ditron.kernels.gather_sum import gather_dot, weighted_gather_sum
from ditron.kernels.gemm import GemmConfig, GemmHooks, cached_linear_order, launch_gemm

CFG = GemmConfig(block_m=16, block_n=16, block_k=16, group_m=2, num_warps=1, num_stages=1,
                 programs=1)
#: K == N so that ``c`` may be laid over ``a`` or ``b``; 3 x 3 tiles, the last partial
M, N, K = 37, 40, 40


def _seed() -> int:
    return int(torch.randint(0, 2**20, (1,)))


def _operands(seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(M, K, generator=g), torch.randn(K, N, generator=g)


def _launch(a, b, c, order=None, hooks=None):
    order = cached_linear_order(M, N, CFG, a.device) if order is None else order
    ctx = gemm._local_context(a.device)
    launch_gemm(a, b, c, M, order=order, seg_rows=M, cfg=CFG, hooks=hooks, ctx=ctx)


@pytest.mark.usefixtures("poisoned")
def test_launch_gemm_refuses_an_output_over_an_operand():
    """Before, ``c`` laid over ``a`` (or ``b``) was launched: later tiles read rows and
    columns earlier ones had overwritten (max error ~100 on these shapes), and an expanded
    ``c`` (zero row stride) had every row block's tiles store into one row."""
    a, b = _operands(_seed())
    a_before, b_before = a.clone(), b.clone()
    store = torch.cat([a.reshape(-1), torch.full((N * M,), float("nan"))])
    cases = [
        ("c overlaps a", (a, b, a[:, :N])),
        ("c overlaps b", (a, b, b[:M])),
        ("c overlaps a", (store[:M * K].view(M, K), b, store[K:K + M * N].view(M, N))),
        ("share memory", (a, b, torch.full((1, N), float("nan")).expand(M, N))),
    ]
    for message, (a_, b_, c_) in cases:
        with pytest.raises(ValueError, match=message):
            _launch(a_, b_, c_)
    assert torch.equal(a, a_before) and torch.equal(b, b_before)
    assert store[M * K:].isnan().all()
    # the gathered A of the colocated pull is an output too
    with pytest.raises(ValueError, match="hooks.gathered overlaps a"):
        _launch(a, b, torch.empty(M, N), hooks=GemmHooks(gathered=a))
    # interleaved views of one buffer share no element: allowed, and right
    buf = torch.randn(M, 2 * N, generator=torch.Generator().manual_seed(_seed()))
    buf[:, ::2] = float("nan")
    operand = buf[:, 1::2]
    want = operand @ b
    _launch(operand, b, buf[:, ::2])
    torch.testing.assert_close(buf[:, ::2], want)


@pytest.mark.usefixtures("poisoned")
def test_launch_gemm_refuses_tile_ids_outside_the_tiling():
    """Before, a negative tile id stored its tile before ``c`` (32 elements of the guard
    rows here) and an id past the last tile was launched (in an epilogue it pushed to a
    segment past the last rank). An order that skips tiles is still run as given."""
    a, b = _operands(_seed())
    guard = torch.full((M + 32, N), float("nan"))
    c = guard[16:16 + M]
    tiles = 9
    for bad, shown in (([0, 1, -1, 2], r"\[-1, 2\]"), ([0, tiles, 3], rf"\[0, {tiles}\]")):
        with pytest.raises(ValueError, match=rf"order holds tile ids in {shown}; this tiling "
                                             rf"has {tiles} tiles"):
            _launch(a, b, c, order=torch.tensor(bad, dtype=torch.int32))
    assert guard.isnan().all()
    # a partial order writes its tiles (rows 0-15: tiles 0, 1, 2), nothing else
    _launch(a, b, c, order=torch.tensor([2, 0, 1], dtype=torch.int64))
    torch.testing.assert_close(c[:16], a[:16] @ b)
    assert c[16:].isnan().all() and guard[:16].isnan().all() and guard[16 + M:].isnan().all()


@pytest.mark.usefixtures("poisoned")
def test_launch_gemm_refuses_waits_past_the_signals():
    """Before, a wait range past ``hooks.wait_sig`` (or a negative chunk) was launched: the
    tile polled the memory after (before) the signals, until the wait timed out or forever
    where that memory never reached the target."""
    a, b = _operands(_seed())
    c = torch.full((M, N), float("nan"))
    order = cached_linear_order(M, N, CFG, a.device)
    sig = torch.ones(2, dtype=torch.int64)  # both chunks arrived (target 1)

    def waits(lo: int, hi: int) -> torch.Tensor:
        table = torch.full((order.numel(),), -1 << 32, dtype=torch.int64)  # hi -1: no wait
        table[3] = (lo & 0xFFFFFFFF) | (hi << 32)
        return table

    for lo, hi, shown in ((0, 2, r"\[0, 2\]"), (-1, 0, r"\[-1, 0\]")):
        with pytest.raises(ValueError, match=rf"hooks.waits names chunks {shown}; "
                                             rf"hooks.wait_sig holds 2 signals"):
            _launch(a, b, c, order=order,
                    hooks=GemmHooks(waits=waits(lo, hi), wait_sig=sig, wait_target=1))
    assert c.isnan().all()
    _launch(a, b, c, order=order,
            hooks=GemmHooks(waits=waits(0, 1), wait_sig=sig, wait_target=1))
    torch.testing.assert_close(c, a @ b)


def _float64_rows(seed: int, N: int):
    g = torch.Generator().manual_seed(seed)
    # large values with small differences: fp32 keeps ~7 of their ~16 digits
    src = 1e4 + torch.randn(29, N, dtype=torch.float64, generator=g)
    src2 = 1e4 + torch.randn(17, N, dtype=torch.float64, generator=g)
    idx = torch.randint(-1, 29, (13, 5), generator=g)
    idx2 = torch.where(idx < 0, torch.randint(-1, 17, (13, 5), generator=g), -1)
    rows = torch.where((idx >= 0)[..., None], src[idx.clamp(min=0)], 0.0)
    two = (idx < 0) & (idx2 >= 0)
    rows2 = torch.where(two[..., None], src2[idx2.clamp(min=0)], rows)
    return g, src, src2, idx, idx2, rows, rows2


#: rows whose loads vectorize (64 elements) and rows whose loads do not (70): the kernels'
#: two tile families, so CI's compile check sees both for float64 (neither spills)
WIDTHS = [64, 70]


@pytest.mark.usefixtures("poisoned")
@pytest.mark.parametrize("two", [False, True])
@pytest.mark.parametrize("N", WIDTHS)
def test_gather_sum_of_float64_rows_sums_in_float64(two, N, device):
    """Before, float64 rows were loaded and summed in fp32 and the sum stored as float64:
    off by ~1e-3 absolute on rows of 1e4 (fp32's 24 bits), silently."""
    g, src, src2, idx, idx2, rows, rows2 = _float64_rows(_seed(), N)
    weights = torch.rand(13, 5, dtype=torch.float64, generator=g)
    kw = {"src2": src2.to(device), "idx2": idx2.to(device)} if two else {}
    out = weighted_gather_sum(src.to(device), idx.to(device), weights.to(device), **kw).cpu()
    assert out.dtype == torch.float64
    want = ((rows2 if two else rows) * weights[..., None]).sum(1)
    torch.testing.assert_close(out, want, rtol=1e-12, atol=1e-9)


@pytest.mark.usefixtures("poisoned")
@pytest.mark.parametrize("slices", [1, 3])
@pytest.mark.parametrize("N", WIDTHS)
def test_gather_dot_of_float64_rows_sums_in_float64(slices, N, device):
    """Before, float64 rows and gradients were multiplied and summed in fp32 (an error of
    ~1e-4 relative on dots of 64-70 products of rows of 1e4); now in float64, rounded to the
    documented fp32 result once."""
    g, src, src2, idx, idx2, rows, rows2 = _float64_rows(_seed(), N)
    grad = torch.randn(13, N, dtype=torch.float64, generator=g)
    out = gather_dot(src.to(device), idx.to(device), grad.to(device), src2=src2.to(device),
                     idx2=idx2.to(device), slices=slices).cpu()
    assert out.dtype == torch.float32
    want = (rows2 * grad[:, None, :]).sum(2)
    torch.testing.assert_close(out, want.float(), rtol=2**-23, atol=1e-6)
