"""Inputs that require grad: every op and path still equals its torch reference, and no
result carries autograd history (a partial history gave wrong gradients, and some paths
raised); ``ditron.nn`` has the differentiable forms."""

from __future__ import annotations

import pytest
import torch

import ditron

from .poison import poison_empty
from .test_tp_gemm import _close, _gather, _sum


def _no_history_case(m: int, K: int, N: int) -> int:
    poison_empty()
    w = ditron.world()
    W, r, dev = w.world_size, w.rank, w.device
    torch.manual_seed(r)
    a = torch.randn(W * m, K, device=dev).requires_grad_()
    torch.manual_seed(99)
    b = torch.randn(N, K, device=dev).t().detach().requires_grad_()
    x, bx = a.detach().double(), b.detach().double()
    gathered, summed = _gather(a.detach()).double(), _sum(a.detach()).double()
    mine = slice(r * m, (r + 1) * m)
    gemm_sum = _sum(x @ bx)
    calls = {
        "ag_gemm": (lambda **k: ditron.ops.ag_gemm(a, b, **k), gathered @ bx),
        "ag_gemm gathered A": (lambda **k: ditron.ops.ag_gemm(a, b, return_gathered=True,
                                                               **k)[1], gathered),
        "gemm_rs": (lambda **k: ditron.ops.gemm_rs(a, b, **k), gemm_sum[mine]),
        "gemm_ar": (lambda **k: ditron.ops.gemm_ar(a, b, **k), gemm_sum),
    }
    checks = 0
    for name, (call, ref) in calls.items():
        for method in ("overlap", "fallback"):
            got = call(method=method)
            _close(f"{name}[{method}]", got, ref, torch.float32)
            assert not got.requires_grad and got.grad_fn is None, f"{name}[{method}]: history"
            checks += 1
    out = torch.empty(m, K, device=dev, requires_grad=True)  # a leaf that requires grad
    to_all = torch.cat([gathered[s * W * m + r * m: s * W * m + (r + 1) * m] for s in range(W)])
    collectives = {
        "all_gather": (lambda e: ditron.ops.all_gather(a, engine=e), gathered),
        "all_gather dim 1": (lambda e: ditron.ops.all_gather(a, 1, engine=e),
                             torch.cat(gathered.split(W * m), 1)),
        "reduce_scatter": (lambda e: ditron.ops.reduce_scatter(a, engine=e), summed[mine]),
        "all_reduce": (lambda e: ditron.ops.all_reduce(a, engine=e), summed),
        "reduce_scatter into out": (lambda e: ditron.ops.reduce_scatter(a, engine=e, out=out),
                                    summed[mine]),
        "all_to_all": (lambda e: ditron.ops.all_to_all(a, engine=e), to_all),
    }
    for name, (call, ref) in collectives.items():
        for engine in ("copy_engine", "sm"):
            got = call(engine)
            _close(f"{name}[{engine}]", got, ref, torch.float32)
            # an `out` is returned as it was given: a leaf, still no history
            assert got.grad_fn is None and (got is out or not got.requires_grad), \
                f"{name}[{engine}]: history"
            checks += 1
    if W > 1:  # point to point: rank 0 sends its rows to rank 1
        if r == 0:
            ditron.ops.send(a, 1)
        elif r == 1:
            got = ditron.ops.recv(a.shape, 0)
            _close("recv", got, gathered[: W * m], torch.float32)
            assert not got.requires_grad
        checks += 1
    return checks


@pytest.mark.parametrize("world_size", [1, 2, 3])
def test_ops_record_no_history(world_size, backend):
    counts = ditron.launch(_no_history_case, world_size, 5, 24, 20, backend=backend)
    assert counts == [counts[0]] * world_size and counts[0] >= 20
