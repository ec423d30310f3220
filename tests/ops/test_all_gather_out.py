"""``ditron.ops.all_gather(x, dim, out=...)``: the result written into a given tensor on every
path (plain, strided and symmetric ``out``, every engine), against torch on fresh random data
for world sizes 1-3; bad ``out`` raises before any kernel. The direct path into a symmetric
``out`` (eager copy engine on CUDA) runs on the GPU here and with emulated driver calls on
the CPU in ``test_raw_pushes.py``."""

from __future__ import annotations

import pytest
import torch

import ditron

from .poison import poison_empty
from .test_collectives import DTYPES, _close, _gather_fp32, _gen


def _outs(shape: tuple[int, ...], dtype: torch.dtype, device: torch.device):
    """``(kind, out)``: a plain tensor, a transposed (non-contiguous) one and a symmetric
    one (collective), each NaN-filled."""
    plain = torch.empty(shape, dtype=dtype, device=device)
    strided = torch.empty(shape[::-1], dtype=dtype, device=device).t()
    symmetric = ditron.empty(shape, dtype)
    for out in (plain, strided, symmetric):
        out.fill_(float("nan"))
    return [("plain", plain), ("strided", strided), ("symmetric", symmetric)]


def check_out(engines: tuple[str, ...], calls: int) -> int:
    poison_empty()
    world = ditron.world()
    me, device = world.rank, world.device
    checks = 0
    for it in range(calls):
        for eng in engines:
            dtype = DTYPES[(it + checks) % len(DTYPES)]
            x = torch.randn(2 + it, 3 + 2 * it, generator=_gen(me, it, 31)).to(dtype)
            parts = [p.to(dtype) for p in _gather_fp32(x)]
            x = x.to(device)
            for dim in (0, 1):
                ref = torch.cat(parts, dim)
                for kind, out in _outs(tuple(ref.shape), dtype, device):
                    got = ditron.ops.all_gather(x, dim, engine=eng, out=out)
                    assert got is out, f"{eng} {kind} dim {dim}: did not return out"
                    _close(out.cpu(), ref, f"all_gather {eng} into {kind} out, dim {dim}, "
                                           f"call {it}")
                    checks += 1
                    if kind == "symmetric":
                        ditron.free(out)
    return checks


def check_bad_out() -> int:
    world = ditron.world()
    x = torch.randn(4, 3, device=world.device)
    w = world.world_size
    bad = [torch.empty(4 * w + 1, 3, device=world.device),
           torch.empty(4 * w, 3, dtype=torch.float16, device=world.device),
           torch.empty(4, 3 * w, device=world.device)]
    raised = 0
    for out in bad:
        with pytest.raises(ValueError, match="all_gather: out is"):
            ditron.ops.all_gather(x, 0, out=out)
        raised += 1
    with pytest.raises(TypeError, match="out must be a torch.Tensor"):
        ditron.ops.all_gather(x, 0, out=[1, 2])
    return raised + 1


@pytest.mark.parametrize("world_size", [1, 2, 3])
def test_all_gather_into_out(world_size):
    engines = ("copy_engine", "sm", "network")
    counts = ditron.launch(check_out, world_size, engines, 2, backend="cpu")
    assert counts == [2 * len(engines) * 2 * 3] * world_size


def test_bad_out_raises_before_kernels():
    assert ditron.launch(check_bad_out, 2, backend="cpu") == [4, 4]


def check_direct_cuda(calls: int) -> int:
    """The direct path on CUDA: repeated calls into one symmetric ``out`` and into a new
    one, sizes that change, checked against torch; returns how many calls took it."""
    from ditron.ops import collectives

    taken = []
    original = collectives.push_gather_direct
    collectives.push_gather_direct = lambda *a: (taken.append(1), original(*a))[1]
    poison_empty()
    world = ditron.world()
    me, device = world.rank, world.device
    out = None
    for it in range(calls):
        rows = 1000 + 37 * (it // 3)  # three calls per size and out
        x = torch.randn(rows, 257, generator=_gen(me, it, 53)).to(torch.bfloat16)
        ref = torch.cat([p.to(x.dtype) for p in _gather_fp32(x)], 0)
        if out is None or out.shape != ref.shape:
            if out is not None:
                ditron.free(out)
            out = ditron.empty(tuple(ref.shape), torch.bfloat16)
        out.fill_(float("nan"))
        got = ditron.ops.all_gather(x.to(device), 0, engine="copy_engine", out=out)
        _close(got.cpu(), ref, f"direct all_gather, call {it}")
    ditron.free(out)
    collectives.push_gather_direct = original
    return len(taken)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_all_gather_direct_cuda_two_ranks():
    """On 2 GPUs (one process each) or 1 GPU shared by 2 processes."""
    assert ditron.launch(check_direct_cuda, 2, 9, backend="cuda") == [9, 9]
