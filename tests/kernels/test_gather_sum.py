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


@pytest.mark.parametrize("dtype,ulp", [(torch.float8_e4m3fn, 2**-3), (torch.float8_e5m2, 2**-2)])
def test_gather_sum_rounds_fp8_to_nearest(dtype, ulp, device):
    # the fp8 sums (moe_combine of fp8 rows) were off by up to half their value on the CPU
    # backend and on an H100 (Triton rounded 1.998 to 1.0 and -0.485 to -0.25); now within
    # one fp8 step of torch's rounding of the fp32 sum
    g = torch.Generator().manual_seed(8)
    src = torch.randn(64, 16, generator=g).to(dtype)
    idx = torch.randint(-1, 64, (32, 2), generator=g)
    weights = torch.rand(32, 2, generator=g)
    out = weighted_gather_sum(src.to(device), idx.to(device), weights.to(device)).cpu()
    assert out.dtype == dtype
    want = _reference(src, idx, weights).to(dtype)
    torch.testing.assert_close(out.float(), want.float(), rtol=ulp, atol=2**-9)


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


@pytest.mark.parametrize("arg,bad", [("idx", torch.float32), ("idx", torch.bool),
                                     ("idx2", torch.float32), ("weights", torch.int32),
                                     ("weights", torch.bool), ("weights", torch.complex64),
                                     ("src", torch.int32), ("src", torch.complex64),
                                     ("src", torch.bool)])
def test_gather_sum_refuses_bad_dtypes(arg, bad):
    # before: a float idx was truncated and a bool one read rows 0 / 1, bool and int
    # weights scaled silently, a complex src or weights raised KeyError from the launch
    kw = {"src": torch.randn(4, 8), "idx": torch.tensor([[0, 3], [-1, 2]]),
          "weights": torch.rand(2, 2), "src2": None, "idx2": None}
    if arg == "idx2":
        kw.update(src2=torch.randn(3, 8), idx2=torch.tensor([[-1, -1], [1, -1]]))
    if arg == "src":
        kw["src"] = kw["src"].to(bad)
    else:
        kw[arg] = kw[arg].to(bad)
    with pytest.raises(ValueError, match=f"weighted_gather_sum: {arg} must "):
        weighted_gather_sum(kw.pop("src"), kw.pop("idx"), kw.pop("weights"), **kw)


def test_gather_dot_refuses_bad_dtypes():
    src, idx, grad = torch.randn(4, 8), torch.tensor([[0, 3], [-1, 2]]), torch.randn(2, 8)
    with pytest.raises(ValueError, match="gather_dot: idx must hold integer row indices"):
        gather_dot(src, idx.float(), grad)
    with pytest.raises(ValueError, match="gather_dot: g must be floating"):
        gather_dot(src, idx, grad.int())
    with pytest.raises(ValueError, match="gather_dot: src must be floating"):
        gather_dot(src.to(torch.complex64), idx, grad)


def _off_device(device: str) -> str:
    """A device other than ``device`` whose tensors the kernels cannot read."""
    return "cpu" if device == "cuda" else "meta"


@pytest.mark.parametrize("arg", ["idx", "weights", "src2", "idx2"])
def test_gather_sum_refuses_another_device(arg, device):
    # before: the launch read a tensor of another device (the interpreter raised
    # NotImplementedError for a meta tensor; a CUDA launch took a host pointer)
    other = _off_device(device)
    kw = {"idx": torch.tensor([[0, 3], [-1, 2]]), "weights": torch.rand(2, 2),
          "src2": torch.randn(3, 8), "idx2": torch.tensor([[-1, -1], [1, -1]])}
    kw = {k: v.to(other if k == arg else device) for k, v in kw.items()}
    src = torch.randn(4, 8, device=device)
    idx, weights = kw.pop("idx"), kw.pop("weights")
    with pytest.raises(ValueError, match=f"weighted_gather_sum: {arg} is on {other}"):
        weighted_gather_sum(src, idx, weights, **kw)
    if arg != "weights":
        with pytest.raises(ValueError, match=f"gather_dot: {arg} is on {other}"):
            gather_dot(src, idx, torch.randn(2, 8, device=device), **kw)
    with pytest.raises(ValueError, match=f"gather_dot: g is on {other}"):
        gather_dot(src, torch.tensor([[0, 3], [-1, 2]], device=device),
                   torch.randn(2, 8, device=other))


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_gather_sum_refuses_host_index_after_a_launch():
    # a launch whose key was seen before skips Triton's argument checks (FastKernel)
    src = torch.randn(4, 8, device="cuda")
    idx, weights = torch.tensor([[0, 3], [-1, 2]]), torch.rand(2, 2)
    want = weighted_gather_sum(src, idx.cuda(), weights.cuda())
    torch.testing.assert_close(want.cpu(), _reference(src.cpu(), idx, weights))
    for args in ((src, idx, weights.cuda()), (src, idx.cuda(), weights)):
        with pytest.raises(ValueError, match="is on cpu and src on cuda"):
            weighted_gather_sum(*args)
