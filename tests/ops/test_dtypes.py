"""Collectives on every dtype they move (``ditron/runtime/dtypes.py``), against
torch.distributed over the host group (gloo) on fresh random data: every dtype must arrive
bit for bit (random bytes, NaN patterns included), outputs poisoned first. The reductions
of every dtype are ``test_reductions.py``'s.
"""

from __future__ import annotations

import math

import pytest
import torch
import torch.distributed as dist

import ditron
from ditron.runtime.dtypes import moved_as
from ditron.runtime.world import current

from .poison import poison_empty
from .test_collectives import _gen
from .test_reductions import _check, _reference, _values

#: moved dtypes outside the three float types of ``test_collectives``: carried ones first
#: (bool, fp8, int16, unsigned, complex64), then the native non-float ones; each carrier
#: serves several of them, so its workspaces are reused across dtypes
MOVED = (torch.bool, torch.float8_e4m3fn, torch.float8_e5m2, torch.int16, torch.uint16,
         torch.uint32, torch.uint64, torch.complex64, torch.uint8, torch.int8, torch.int32,
         torch.int64, torch.float64)


def _bits(shape: tuple[int, ...], dtype: torch.dtype, g: torch.Generator) -> torch.Tensor:
    """Random elements of ``dtype``: every byte random (bool: 0 or 1)."""
    if dtype == torch.bool:
        return torch.randint(0, 2, shape, generator=g).bool()
    raw = torch.randint(0, 256, (*shape, dtype.itemsize), dtype=torch.uint8, generator=g)
    return raw.view(dtype).squeeze(-1)


def _bytes(x: torch.Tensor) -> torch.Tensor:
    return x.contiguous().view(torch.uint8)


def _same_bits(got: torch.Tensor, ref: torch.Tensor, what: str) -> None:
    assert got.dtype == ref.dtype and got.shape == ref.shape, (
        f"{what}: {got.dtype} {tuple(got.shape)} != {ref.dtype} {tuple(ref.shape)}")
    assert torch.equal(_bytes(got.cpu()), _bytes(ref)), f"{what}: bits differ"


def _gathered(x: torch.Tensor) -> list[torch.Tensor]:
    """Every rank's ``x`` (same shape on every rank), moved as bytes by gloo."""
    mine = _bytes(x).view(-1)
    parts = [torch.empty_like(mine) for _ in range(dist.get_world_size())]
    dist.all_gather(parts, mine, group=current().host_group)
    return [p.view(x.dtype).view(x.shape) for p in parts]


def _a2a_bytes(x: torch.Tensor, ins: list[int]) -> tuple[list[int], torch.Tensor]:
    """(rows received from each rank, the received rows) by ``dist.all_to_all_single``."""
    host = current().host_group
    outs = torch.empty(len(ins), dtype=torch.int64)
    dist.all_to_all_single(outs, torch.tensor(ins), group=host)
    rows = _bytes(x).view(x.shape[0], math.prod(x.shape[1:]) * x.element_size())
    ref = torch.empty(int(outs.sum()), rows.shape[1], dtype=torch.uint8)
    dist.all_to_all_single(ref, rows, outs.tolist(), ins, group=host)
    return outs.tolist(), ref.view(x.dtype).view(-1, *x.shape[1:])


def check_moved(engines: tuple[str | None, ...]) -> int:
    """all_gather (dim 0, a non-contiguous dim 1, into ``out``, widened), all_to_all
    (uneven with a zero split, even and widened, 1-D), both from a view at an odd storage
    offset, and send/recv around the ring, every
    ``MOVED`` dtype."""
    poison_empty()
    w, me = ditron.world().world_size, ditron.world().rank
    dev = ditron.world().device
    ops = ditron.ops
    checks = 0
    for engine in engines:
        for it, dtype in enumerate(MOVED):
            g = _gen(me, it, 17, len(str(engine)))
            what = f"{dtype} {engine}"
            x = _bits((3, 5), dtype, g)
            ref = torch.cat(_gathered(x), 0)
            _same_bits(ops.all_gather(x.to(dev), engine=engine), ref, f"all_gather {what}")
            out = torch.empty((3 * w, 5), dtype=dtype, device=dev)
            assert ops.all_gather(x.to(dev), out=out, engine=engine) is out
            _same_bits(out, ref, f"all_gather out= {what}")
            xt = _bits((4, 2 + it % 2), dtype, g).t()
            _same_bits(ops.all_gather(xt.to(dev), 1, engine=engine),
                       torch.cat(_gathered(xt), 1), f"all_gather dim 1 {what}")
            # rows of 8 elements: moved as int64 (wider than most of these dtypes), from a
            # view whose rows lie 9 elements apart (widened only after a copy)
            xw = _bits((3, 9), dtype, g)[:, :8]
            ref = torch.cat(_gathered(xw), 0)
            _same_bits(ops.all_gather(xw.to(dev), engine=engine), ref,
                       f"all_gather wide {what}")
            # the same into a given out: one that can be viewed wider, and one whose rows
            # lie 9 elements apart (gathered, then copied in)
            for out in (torch.empty((3 * w, 8), dtype=dtype, device=dev),
                        torch.empty((3 * w, 9), dtype=dtype, device=dev)[:, :8]):
                assert ops.all_gather(xw.to(dev), out=out, engine=engine) is out
                _same_bits(out, ref, f"all_gather wide out= {what}")
            ins = torch.randint(0, 3, (w,), generator=g).tolist()
            ins[(me + it) % w] = 0
            x = _bits((sum(ins), 2, 3), dtype, g)
            outs, ref = _a2a_bytes(x, ins)
            _same_bits(ops.all_to_all(x.to(dev), ins, outs, engine=engine), ref,
                       f"all_to_all {what}")
            x = _bits((2 * w, 8), dtype, g)
            _same_bits(ops.all_to_all(x.to(dev), engine=engine), _a2a_bytes(x, [2] * w)[1],
                       f"all_to_all even {what}")
            # contiguous, one element into its storage: its rows of 8 cannot be viewed as
            # int64 in place (a copy first)
            xo = _bits((2 * w * 8 + 1,), dtype, g).to(dev)[1:].view(2 * w, 8)
            _same_bits(ops.all_gather(xo, engine=engine), torch.cat(_gathered(xo.cpu()), 0),
                       f"all_gather offset view {what}")
            _same_bits(ops.all_to_all(xo, engine=engine), _a2a_bytes(xo.cpu(), [2] * w)[1],
                       f"all_to_all offset view {what}")
            x = _bits((sum(ins),), dtype, g)  # 1-D: the splits cut the only dimension
            outs, ref = _a2a_bytes(x, ins)
            _same_bits(ops.all_to_all(x.to(dev), ins, outs, engine=engine), ref,
                       f"all_to_all 1-D {what}")
            checks += 11
    if w > 1:
        nxt, prv = (me + 1) % w, (me - 1) % w
        for it, dtype in enumerate(MOVED):
            mine = _bits((4, 3), dtype, _gen(me, it, 23)).t()  # non-contiguous
            sent = _bits((4, 3), dtype, _gen(prv, it, 23)).t()
            if me % 2 == 0:
                ops.send(mine.to(dev), nxt)
                got = ops.recv((3, 4), prv, dtype=dtype)
            else:
                got = ops.recv((3, 4), prv, dtype=dtype)
                ops.send(mine.to(dev), nxt)
            _same_bits(got, sent.contiguous(), f"recv {dtype}")
            checks += 1
    return checks


@pytest.fixture(autouse=True)
def _poison(monkeypatch):
    monkeypatch.setenv("DITRON_POISON", "1")  # fresh workspaces hold 0xFF bytes


@pytest.mark.parametrize("world_size", [1, 2, 3, 4])
def test_moved_dtypes_arrive_bit_for_bit(world_size, backend):
    engines = ("copy_engine", "sm") + (("tma",) if world_size == 2 else ())
    counts = ditron.launch(check_moved, world_size, engines, backend=backend)
    ring = len(MOVED) if world_size > 1 else 0
    assert counts == [11 * len(MOVED) * len(engines) + ring] * world_size


def test_moved_dtypes_over_the_network_engine():
    counts = ditron.launch(check_moved, 3, ("network",), backend="cpu")
    assert counts == [12 * len(MOVED)] * 3


def test_moved_as_widens_only_what_the_shape_allows():
    assert moved_as(torch.uint8, (3, 8)) == torch.int64
    assert moved_as(torch.bool, (3, 4)) == torch.int32
    assert moved_as(torch.float8_e4m3fn, (3, 6)) == torch.float16
    assert moved_as(torch.bool, (3, 5)) == torch.uint8
    assert moved_as(torch.int16, (2, 3)) == torch.float16  # 6 bytes: no wider width divides
    assert moved_as(torch.uint32, (0, 2)) == torch.int64
    assert moved_as(torch.complex64, (3,)) == torch.int64
    assert moved_as(torch.uint8, (3, 8), widen=False) == torch.uint8
    assert moved_as(torch.bool, ()) == torch.uint8
    for dtype in (torch.bfloat16, torch.float16, torch.float32):  # their own, tuned path
        assert moved_as(dtype, (4, 8)) == dtype


def check_pieces() -> int:
    """8-byte elements in fused launches of half as many elements as 4-byte ones: inputs
    that take several launches, summed and moved with the SM engine."""
    from ditron.ops import fused_launch

    poison_empty()
    w, me = ditron.world().world_size, ditron.world().rank
    dev = ditron.world().device
    default_max = fused_launch.FUSED_MAX_ELEMENTS, fused_launch.FUSED_RS_MAX_ELEMENTS
    fused_launch.FUSED_MAX_ELEMENTS = fused_launch.FUSED_RS_MAX_ELEMENTS = 2048
    checks = 0
    try:
        for dtype in (torch.int64, torch.float64):
            g = _gen(me, 37, dtype.is_floating_point)
            x = _values((3, 700), dtype, g)  # 2100 elements: three launches of 1024
            for method in ("one_shot", "two_shot"):
                _check(_on_sm(ditron.ops.all_reduce, x.to(dev), method), _reference(x, "sum"),
                       f"pieces all_reduce {method} {dtype}")
            xr = _values((w * 1100,), dtype, g)  # segments of 1100: two launches
            _check(_on_sm(ditron.ops.reduce_scatter, xr.to(dev)),
                   _reference(xr, "sum").chunk(w)[me], f"pieces reduce_scatter {dtype}")
            _same_bits(_on_sm(ditron.ops.all_gather, x.to(dev)), torch.cat(_gathered(x)),
                       f"pieces all_gather {dtype}")
            checks += 4
    finally:
        fused_launch.FUSED_MAX_ELEMENTS, fused_launch.FUSED_RS_MAX_ELEMENTS = default_max
    return checks


def _on_sm(op, *args):
    return op(*args, engine="sm")


@pytest.mark.parametrize("world_size", [2, 3])
def test_wide_elements_in_several_launches(world_size, backend):
    assert ditron.launch(check_pieces, world_size, backend=backend) == [8] * world_size


def check_device_splits() -> int:
    """all_to_all_device on carried and native non-float dtypes."""
    poison_empty()
    w, me = ditron.world().world_size, ditron.world().rank
    dev = ditron.world().device
    checks = 0
    for it, dtype in enumerate((torch.int64, torch.bool, torch.float8_e4m3fn, torch.int64)):
        g = _gen(me, it, 31)
        ins = torch.randint(0, 3, (w,), generator=g).tolist()
        x = _bits((sum(ins), 4), dtype, g)
        outs, ref = _a2a_bytes(x, ins)
        cap = 3 * w
        out, out_splits = ditron.ops.all_to_all_device(x.to(dev), torch.tensor(ins).to(dev),
                                                       cap)
        assert out.dtype == dtype and out.shape == (cap, 4)
        assert out_splits.cpu().tolist() == outs
        _same_bits(out[: sum(outs)], ref, f"all_to_all_device {dtype} call {it}")
        checks += 1
    return checks


@pytest.mark.parametrize("world_size", [2, 3])
def test_all_to_all_device_moves_any_dtype(world_size, backend):
    assert ditron.launch(check_device_splits, world_size, backend=backend) == [4] * world_size


def check_device_views() -> int:
    """all_to_all_device / _pair of negative and conjugate views (``z.conj().imag``,
    ``z.conj()``) move their values, not their bits (a negative view arrived un-negated)."""
    w, me = ditron.world().world_size, ditron.world().rank
    dev = ditron.world().device
    checks = 0
    for it in range(2):  # twice: the workspaces of the first call are reused
        zs = [torch.randn(w, 3, dtype=torch.complex64, generator=_gen(r, it, 41))
              for r in range(w)]
        ones = torch.ones(w, dtype=torch.int64, device=dev)
        z = zs[me].to(dev)
        neg = z.conj().imag  # a negative view of z's imaginary parts (strided)
        flat = torch._neg_view(z.imag.contiguous())  # a contiguous one: its bits travelled
        assert neg.is_neg() and flat.is_neg() and flat.is_contiguous()
        want_neg = torch.stack([-zs[r][me].imag for r in range(w)])
        want_conj = torch.stack([zs[r][me].conj() for r in range(w)])
        for v in (neg, flat):
            out, _ = ditron.ops.all_to_all_device(v, ones, w)
            assert torch.equal(out.cpu(), want_neg), f"negative view, call {it}"
        out, _ = ditron.ops.all_to_all_device(z.conj(), ones, w)
        assert torch.equal(out.resolve_conj().cpu(), want_conj), f"conjugate view, call {it}"
        rows, extra, _ = ditron.ops.all_to_all_device_pair(z.real, flat, ones, w)
        assert torch.equal(rows.cpu(), torch.stack([zs[r][me].real for r in range(w)]))
        assert torch.equal(extra.cpu(), want_neg), f"negative extra rows, call {it}"
        checks += 1
    return checks


@pytest.mark.parametrize("world_size", [1, 3])
def test_all_to_all_device_moves_values_of_views(world_size, backend):
    assert ditron.launch(check_device_views, world_size, backend=backend) == [2] * world_size


def check_refused() -> int:
    """What cannot be summed or moved raises ``ValueError`` before any transfer, and the
    ops still work afterwards."""
    ops = ditron.ops
    dev = ditron.world().device
    x = torch.ones(4, 2, device=dev)
    cases = [
        ("cannot sum dtype torch.bool", lambda: ops.all_reduce(x.bool())),
        ("cannot sum dtype torch.float8_e4m3fn",
         lambda: ops.reduce_scatter(x.to(torch.float8_e4m3fn))),
        ("cannot sum dtype torch.int16", lambda: ops.all_reduce(x.to(torch.int16))),
        ("cannot sum dtype torch.complex64", lambda: ops.all_reduce(x.to(torch.complex64))),
        (r"complex128 \(16 bytes\) is not supported",
         lambda: ops.all_gather(x.to(torch.complex128))),
        ("dense, unquantized", lambda: ops.all_gather(x.cpu().to_sparse().to(dev))),
    ]
    for words, fn in cases:
        with pytest.raises(ValueError, match=words):
            fn()
    w = ditron.world().world_size
    assert torch.equal(ops.all_reduce(x.long()).cpu(), torch.full((4, 2), w))
    return len(cases)


def test_refused_dtypes_raise_before_any_transfer():
    assert ditron.launch(check_refused, 2, backend="cpu") == [6, 6]
