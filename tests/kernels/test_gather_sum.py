"""The weighted gather-sum against torch on fresh random rows and indices (the MoE
combine's sum), with one source and with a second one filling the rows the first leaves
out, and the gather-dot (the sum's weights' gradient). Outputs come from ``torch.empty``
filled with NaN (``poisoned``, conftest.py): a row the kernel never writes fails the comparison."""

from __future__ import annotations

import pytest
import torch

from ditron.kernels.gather_sum import gather_dot, weighted_gather_sum

pytestmark = pytest.mark.usefixtures("poisoned")

#: (T, k, N): rows shorter than a block; rows of several blocks with a partial one; rows
#: of 16-byte aligned loads; more copies than a power of two (tiles pad k, and narrow for
#: many copies), on rows whose loads vectorize or not. The kernels' tiles depend on these
#: alone, so CI's compile check sees each tile a GPU would pick for them and keeps it
#: spill-free.
SHAPES = [(13, 3, 20), (37, 8, 300), (21, 8, 256), (11, 20, 70), (9, 20, 256)]


def _rows(src, idx, src2=None, idx2=None) -> torch.Tensor:
    """``[T, k, N]`` fp32: each copy's row, zero where it has none."""
    rows = torch.where((idx >= 0)[..., None], src.float()[idx.clamp(min=0)], 0.0)
    if src2 is not None:
        two = (idx < 0) & (idx2 >= 0)
        rows = torch.where(two[..., None], src2.float()[idx2.clamp(min=0)], rows)
    return rows


def _reference(src, idx, weights, src2=None, idx2=None) -> torch.Tensor:
    rows = _rows(src, idx, src2, idx2)
    if weights is not None:
        rows = rows * weights.float()[..., None]
    return rows.sum(1)


@pytest.mark.parametrize("T,k,N", SHAPES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("two", [False, True])
def test_gather_sum_matches_torch(T, k, N, dtype, two, device):
    g = torch.Generator().manual_seed(T * k + two)
    src = torch.randn(29, N, generator=g).to(dtype)
    src2 = torch.randn(17, N, generator=g).to(dtype)
    idx = torch.randint(-1, 29, (T, k), generator=g)  # -1: no row here
    idx2 = torch.where(idx < 0, torch.randint(-1, 17, (T, k), generator=g), -1)
    weights = torch.rand(T, k, generator=g)
    for w in (weights, None):
        kw = {"src2": src2.to(device), "idx2": idx2.to(device)} if two else {}
        out = weighted_gather_sum(src.to(device), idx.to(device),
                                  None if w is None else w.to(device), **kw).cpu()
        want = _reference(src, idx, w, *((src2, idx2) if two else ()))
        tol = 1e-5 if dtype == torch.float32 else 1e-2
        torch.testing.assert_close(out.float(), want.to(dtype).float(), atol=tol, rtol=tol)


@pytest.mark.parametrize("T,k,N", SHAPES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("two", [False, True])
@pytest.mark.parametrize("slices", [None, 3])
def test_gather_dot_matches_torch(T, k, N, dtype, two, slices, device):
    g = torch.Generator().manual_seed(T * k + two + 7)
    src = torch.randn(29, N, generator=g).to(dtype)
    src2 = torch.randn(17, N, generator=g).to(dtype)
    idx = torch.randint(-1, 29, (T, k), generator=g)
    idx2 = torch.where(idx < 0, torch.randint(-1, 17, (T, k), generator=g), -1)
    grad = torch.randn(T, N, generator=g).to(dtype)
    kw = {"src2": src2.to(device), "idx2": idx2.to(device)} if two else {}
    out = gather_dot(src.to(device), idx.to(device), grad.to(device), slices=slices,
                     **kw).cpu()
    want = (_rows(src, idx, *((src2, idx2) if two else ())) * grad.float()[:, None, :]).sum(2)
    assert out.dtype == torch.float32
    torch.testing.assert_close(out, want, atol=1e-4 * N ** 0.5, rtol=1e-4)


def test_gather_dot_refuses_a_bad_gradient():
    src, idx = torch.zeros(4, 8), torch.zeros(2, 3, dtype=torch.int64)
    for grad in (torch.zeros(2, 7), torch.zeros(3, 8), torch.zeros(8, 2).t()):
        with pytest.raises(ValueError, match="gather_dot: g must be"):
            gather_dot(src, idx, grad)


def test_gather_sum_refuses_mismatched_sources():
    src, idx = torch.zeros(4, 8), torch.zeros(2, 3, dtype=torch.int64)
    for kw in ({"src2": src}, {"idx2": idx}, {"src2": torch.zeros(4, 9), "idx2": idx},
               {"src2": src.half(), "idx2": idx}, {"src2": src, "idx2": idx[:, :2]}):
        with pytest.raises(ValueError, match="src2 and idx2 go together"):
            weighted_gather_sum(src, idx, **kw)
