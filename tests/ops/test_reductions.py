"""reduce_scatter and all_reduce with every reduction (``op=``) against
``dist.all_reduce(y, ReduceOp)`` over the host group (gloo), on fresh random data with
poisoned outputs: sums, averages (``ReduceOp.SUM`` divided by the world size, in fp32),
max and min, for float, integer and bool tensors, every engine, repeated calls. Integer and
fp64 sums must be exact (they accumulate in their own type).
"""

from __future__ import annotations

import pytest
import torch
import torch.distributed as dist

import ditron
from ditron.runtime.world import current

from .poison import poison_empty
from .test_collectives import _gen

OPS = {"sum": dist.ReduceOp.SUM, "avg": dist.ReduceOp.SUM, "max": dist.ReduceOp.MAX,
       "min": dist.ReduceOp.MIN}
#: per dtype, the ops it takes
DTYPES = {torch.float32: tuple(OPS), torch.bfloat16: tuple(OPS), torch.float64: tuple(OPS),
          torch.int64: ("sum", "max", "min"), torch.int32: ("sum", "max", "min"),
          torch.int8: ("sum",), torch.uint8: ("sum", "max"), torch.bool: ("max", "min")}
#: integer values: large enough that a sum in fp32 would round (int32, int64), or that it
#: wraps (uint8), as torch.distributed's integer sums do
INTEGERS = {torch.int64: (-(2**40), 2**40), torch.int32: (-(2**28), 2**28),
            torch.int8: (-30, 30), torch.uint8: (0, 256)}


def _values(shape: tuple[int, ...], dtype: torch.dtype, g: torch.Generator) -> torch.Tensor:
    if dtype == torch.bool:
        return torch.rand(shape, generator=g) < 0.3
    if dtype in INTEGERS:
        return torch.randint(*INTEGERS[dtype], shape, dtype=torch.int64, generator=g).to(dtype)
    return torch.randn(shape, generator=g).to(dtype)


def _reference(x: torch.Tensor, op: str) -> torch.Tensor:
    """``dist.all_reduce`` with ``op``'s ReduceOp, in fp32 for 16-bit floats and averages
    (gloo sums bf16 in bf16), as uint8 for bool."""
    w = dist.get_world_size()
    y = x.to(torch.uint8) if x.dtype == torch.bool else x.clone()
    if x.dtype == torch.bfloat16 or op == "avg":
        y = y.double() if x.dtype == torch.float64 else y.float()
    dist.all_reduce(y, OPS[op], group=current().host_group)
    if op == "avg":
        y /= w
    return y.to(x.dtype)


def _check(got: torch.Tensor, ref: torch.Tensor, what: str, exact: bool = False) -> None:
    """``got`` equals ``ref``: within the dtype's tolerance for float sums and averages,
    bit for bit otherwise (``exact``: max and min pick one rank's value)."""
    got = got.cpu()
    assert got.dtype == ref.dtype and got.shape == ref.shape, (
        f"{what}: {got.dtype} {tuple(got.shape)} != {ref.dtype} {tuple(ref.shape)}")
    if ref.dtype.is_floating_point and not exact:
        tol = {torch.bfloat16: 1e-2, torch.float32: 1e-5, torch.float64: 1e-12}[ref.dtype]
        torch.testing.assert_close(got, ref, rtol=tol, atol=tol, msg=what)
    else:
        assert torch.equal(got, ref), f"{what}: {got} != {ref}"


def check_reductions(engines: tuple[str, ...], calls: int = 2) -> int:
    """Every (dtype, op) of ``DTYPES``: reduce_scatter along dim 0 and a non-contiguous
    dim 1, into a given ``out``; all_reduce with both methods on a size that does not
    divide by the world size; ``calls`` times each."""
    poison_empty()
    w, me = ditron.world().world_size, ditron.world().rank
    dev = ditron.world().device
    ops = ditron.ops
    checks = 0
    for engine in engines:
        for it in range(calls):
            for k, (dtype, names) in enumerate(DTYPES.items()):
                for op in names:
                    g = _gen(me, it, k, len(op), len(engine))
                    what = f"{op} {dtype} {engine} call {it}"
                    exact = op in ("max", "min")
                    x = _values((2 * w, 5), dtype, g)
                    ref = _reference(x, op)
                    _check(ops.reduce_scatter(x.to(dev), op=op, engine=engine),
                           ref.chunk(w)[me], f"reduce_scatter {what}", exact)
                    out = torch.empty((2, 5), dtype=dtype, device=dev)
                    assert ops.reduce_scatter(x.to(dev), op=op, engine=engine, out=out) is out
                    _check(out, ref.chunk(w)[me], f"reduce_scatter out= {what}", exact)
                    xt = _values((3 * w, 4), dtype, g).t()
                    _check(ops.reduce_scatter(xt.to(dev), 1, op=op, engine=engine),
                           _reference(xt.contiguous(), op).chunk(w, 1)[me],
                           f"reduce_scatter dim 1 {what}", exact)
                    x = _values((7, 3), dtype, g)
                    ref = _reference(x, op)
                    for method in ("one_shot", "two_shot"):
                        _check(ops.all_reduce(x.to(dev), method, op=op, engine=engine), ref,
                               f"all_reduce {method} {what}", exact)
                    checks += 5
    return checks


def _count(engines: tuple[str, ...], calls: int = 2) -> int:
    return 5 * calls * len(engines) * sum(len(names) for names in DTYPES.values())


@pytest.mark.parametrize("world_size", [1, 2, 3, 4])
def test_reductions_match_torch(world_size, backend):
    engines = ("copy_engine", "sm")
    counts = ditron.launch(check_reductions, world_size, engines, backend=backend)
    assert counts == [_count(engines)] * world_size


def test_reductions_over_the_network_engine():
    counts = ditron.launch(check_reductions, 3, ("network",), 1, backend="cpu")
    assert counts == [_count(("network",), 1)] * 3


def check_nan_and_names() -> int:
    """max / min propagate a NaN of any rank (as ``torch.maximum``); ``dist.ReduceOp``
    members name the same reductions; unsupported ones raise before any transfer."""
    w, me = ditron.world().world_size, ditron.world().rank
    dev = ditron.world().device
    ops = ditron.ops
    checks = 0
    for engine in ("copy_engine", "sm"):
        x = torch.full((2 * w, 3), float(me), device=dev)
        if me == w - 1:
            x[1, 2] = float("nan")
        for op in ("max", "min"):
            got = ops.all_reduce(x, op=op, engine=engine).cpu()
            assert got[1, 2].isnan() and not got[0].isnan().any(), (engine, op, got)
            assert got[0, 0] == (w - 1 if op == "max" else 0)
            checks += 1
    x = torch.arange(4 * w, dtype=torch.float32, device=dev) * (me + 1)
    assert torch.equal(ops.all_reduce(x, op=dist.ReduceOp.MAX).cpu(), (x * w / (me + 1)).cpu())
    cases = [
        ("unsupported reduction 'prod'", lambda: ops.all_reduce(x, op="prod")),
        ("unsupported reduction", lambda: ops.reduce_scatter(x, op=dist.ReduceOp.PRODUCT)),
        ("cannot average dtype torch.int64", lambda: ops.all_reduce(x.long(), op="avg")),
        ("cannot take the max of dtype torch.float8_e4m3fn",
         lambda: ops.all_reduce(x.to(torch.float8_e4m3fn), op="max")),
        ("cannot sum dtype torch.bool", lambda: ops.reduce_scatter(x.bool())),
    ]
    for words, fn in cases:
        with pytest.raises(ValueError, match=words):
            fn()
    assert torch.equal(ops.all_reduce(x, op="min").cpu(), (x / (me + 1)).cpu())  # still works
    return checks + 2 + len(cases)


@pytest.mark.parametrize("world_size", [2, 3])
def test_nan_propagation_and_reduce_op_names(world_size, backend):
    assert ditron.launch(check_nan_and_names, world_size, backend=backend) == [11] * world_size


@pytest.fixture(autouse=True)
def _poison(monkeypatch):
    monkeypatch.setenv("DITRON_POISON", "1")  # fresh workspaces hold 0xFF bytes
