"""The ops under the caller's torch modes. Inputs that require grad: results equal the
torch references and carry no autograd history (a partial history gave wrong gradients, and
some paths raised; ``ditron.nn`` has the differentiable forms). ``torch.autocast``: every
path computes and returns the inputs' dtype (the fallback's matmul followed autocast and
crashed the gloo reduction). ``torch.inference_mode``: calls inside it, outside it and
inside again all work (workspaces made in the first call must not become inference
tensors), and an inference ``out`` outside it is refused up front. A default device
(``with torch.device(...)``: ``meta``, which holds no data, and the ranks' own, as GPU code
sets it): host-side tables used to follow it. ``torch.compile`` over code that calls the
ops: each op is a graph break (Dynamo used to fail inside the ops' host code)."""

from __future__ import annotations

import contextlib

import pytest
import torch

import ditron

from .poison import poison_empty
from .test_tp_gemm import _close, _gather, _sum


def _calls(a: torch.Tensor, b: torch.Tensor, out: torch.Tensor, m: int) -> dict:
    """name -> (call, torch reference) over every op, method and engine on one node."""
    w = ditron.world()
    W, r = w.world_size, w.rank
    x, bx = a.detach().double(), b.detach().double()
    gathered, summed = _gather(a.detach()).double(), _sum(a.detach()).double()
    mine = slice(r * m, (r + 1) * m)
    gemm_sum = _sum(x @ bx)
    calls = {}
    for method in ("overlap", "fallback"):
        calls |= {
            f"ag_gemm[{method}]": (lambda k=method: ditron.ops.ag_gemm(a, b, method=k),
                                   gathered @ bx),
            f"ag_gemm[{method}] gathered A": (
                lambda k=method: ditron.ops.ag_gemm(a, b, return_gathered=True, method=k)[1],
                gathered),
            f"gemm_rs[{method}]": (lambda k=method: ditron.ops.gemm_rs(a, b, method=k),
                                   gemm_sum[mine]),
            f"gemm_ar[{method}]": (lambda k=method: ditron.ops.gemm_ar(a, b, method=k),
                                   gemm_sum),
        }
    for engine in ("copy_engine", "copy_engine_pull"):
        calls[f"gemm_rs[{engine}]"] = (
            lambda e=engine: ditron.ops.gemm_rs(a, b, method="overlap", engine=e),
            gemm_sum[mine])
    to_all = torch.cat([gathered[s * W * m + r * m: s * W * m + (r + 1) * m] for s in range(W)])
    for engine in ("copy_engine", "sm"):
        calls |= {
            f"all_gather[{engine}]": (lambda e=engine: ditron.ops.all_gather(a, engine=e),
                                      gathered),
            f"all_gather dim 1[{engine}]": (
                lambda e=engine: ditron.ops.all_gather(a, 1, engine=e),
                torch.cat(gathered.split(W * m), 1)),
            f"reduce_scatter[{engine}]": (
                lambda e=engine: ditron.ops.reduce_scatter(a, engine=e), summed[mine]),
            f"reduce_scatter into out[{engine}]": (
                lambda e=engine: ditron.ops.reduce_scatter(a, engine=e, out=out),
                summed[mine]),
            f"all_reduce[{engine}]": (lambda e=engine: ditron.ops.all_reduce(a, engine=e),
                                      summed),
            f"all_to_all[{engine}]": (lambda e=engine: ditron.ops.all_to_all(a, engine=e),
                                      to_all),
        }
    return calls


def _inputs(m: int, K: int, N: int, grad: bool) -> tuple:
    w = ditron.world()
    torch.manual_seed(w.rank)
    a = torch.randn(w.world_size * m, K, device=w.device)
    torch.manual_seed(99)  # the same weight on every rank
    b = torch.randn(N, K, device=w.device).t()  # a transposed linear weight
    out = torch.empty(m, K, device=w.device)
    if grad:
        a, b, out = a.requires_grad_(), b.detach().requires_grad_(), out.requires_grad_()
    return a, b, out


def _point_to_point(a: torch.Tensor) -> None:
    """Rank 0 sends its rows to rank 1."""
    r = ditron.world().rank
    ref = _gather(a.detach())[: a.shape[0]].double()  # collective: every rank
    if r == 0:
        ditron.ops.send(a, 1)
    elif r == 1:
        got = ditron.ops.recv(a.shape, 0)
        _close("recv", got, ref, torch.float32)
        assert not got.requires_grad


def _no_history_case(m: int, K: int, N: int) -> int:
    poison_empty()
    a, b, out = _inputs(m, K, N, grad=True)
    checks = 0
    for name, (call, ref) in _calls(a, b, out, m).items():
        got = call()
        _close(name, got, ref, torch.float32)
        # an `out` is returned as it was given: a leaf, still without history
        assert got.grad_fn is None and (got is out or not got.requires_grad), f"{name}: history"
        checks += 1
    if ditron.world().world_size > 1:
        _point_to_point(a)
    return checks


def _inference_case(m: int, K: int, N: int) -> list[str]:
    poison_empty()
    checks = []
    for mode in ("inference", "plain", "inference", "no_grad", "plain"):
        ctx = {"inference": torch.inference_mode(), "no_grad": torch.no_grad(),
               "plain": contextlib.nullcontext()}[mode]
        with ctx:  # inputs made in the mode: inference tensors under inference_mode
            a, b, out = _inputs(m, K, N, grad=False)
            assert a.is_inference() == (mode == "inference")
            for name, (call, ref) in _calls(a, b, out, m).items():
                _close(f"{mode}: {name}", call(), ref, torch.float32)
            if ditron.world().world_size > 1:
                _point_to_point(a)
            checks.append(mode)
    with torch.inference_mode():
        a, _, out = _inputs(m, K, N, grad=False)
    with pytest.raises(ValueError, match="made under torch.inference_mode"):
        ditron.ops.reduce_scatter(a, out=out)
    with pytest.raises(ValueError, match="made under torch.inference_mode"):
        ditron.ops.all_gather(out, out=a)
    # a refused recv takes what its peer sends (which then returns) before raising
    me, w = ditron.world().rank, ditron.world().world_size
    if me == 1:
        ditron.ops.send(torch.zeros(out.shape), 0)
    if me == 0:
        with pytest.raises(ValueError, match="made under torch.inference_mode"):
            ditron.ops.recv(out, 1 % w)
    return checks


@pytest.mark.parametrize("world_size", [1, 2, 3])
def test_ops_under_inference_mode(world_size, backend):
    res = ditron.launch(_inference_case, world_size, 5, 24, 20, backend=backend)
    assert res == [["inference", "plain", "inference", "no_grad", "plain"]] * world_size


def _autocast_case(m: int, K: int, N: int) -> int:
    poison_empty()
    a, b, out = _inputs(m, K, N, grad=False)
    calls = _calls(a, b, out, m)
    with torch.autocast(ditron.world().device.type, dtype=torch.bfloat16):
        for name, (call, ref) in calls.items():
            _close(name, call(), ref, torch.float32)  # float32 out, to float32's tolerance
        assert torch.is_autocast_enabled(ditron.world().device.type)  # restored
    return len(calls)


def _default_device_case(m: int, K: int, N: int) -> int:
    poison_empty()
    a, b, out = _inputs(m, K, N, grad=False)
    calls = _calls(a, b, out, m)  # references first: they need data
    # meta holds no data; the ranks' own device as the default is what GPU code sets
    # (torch.set_default_device("cuda")): host tables must stay on the host under both
    for device in ("meta", ditron.world().device):
        with torch.device(device):
            for name, (call, ref) in calls.items():
                _close(f"default {device}: {name}", call(), ref, torch.float32)
            if ditron.world().world_size > 1:
                _point_to_point(a)
    return len(calls)


#: the cases that run every op, method and engine against its reference under one mode
MODE_CASES = {"requires_grad": _no_history_case, "autocast": _autocast_case,
              "default_device": _default_device_case}


@pytest.mark.parametrize("world_size", [1, 2, 3])
@pytest.mark.parametrize("mode", sorted(MODE_CASES))
def test_ops_under_the_callers_mode(mode, world_size, backend):
    counts = ditron.launch(MODE_CASES[mode], world_size, 5, 24, 20, backend=backend)
    assert counts == [counts[0]] * world_size and counts[0] >= 20


def _compiled_case(m: int, K: int, N: int) -> int:
    poison_empty()
    torch._dynamo.reset()
    a, b, _ = _inputs(m, K, N, grad=False)
    mine = slice(ditron.world().rank * m, (ditron.world().rank + 1) * m)
    ref = (_gather(a[mine]).double() @ b.double(), _sum(a.double() @ b.double())[mine],
           2 * _sum(a.double()) + 1)

    def layer(a, b):  # torch ops around the ops: compiled pieces between the breaks
        return (ditron.ops.ag_gemm(a[mine] * 1.0, b), ditron.ops.gemm_rs(a, b),
                ditron.ops.all_reduce(a * 2) + 1)

    compiled = torch.compile(layer, backend="aot_eager")
    for call in range(2):
        got = compiled(a, b)
        for name, out, want in zip(("ag_gemm", "gemm_rs", "all_reduce"), got, ref, strict=True):
            _close(f"compiled {name}, call {call}", out, want, torch.float32)
    return 3


def test_ops_inside_torch_compile(backend):
    assert ditron.launch(_compiled_case, 2, 5, 24, 20, backend=backend) == [3, 3]
