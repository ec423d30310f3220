"""The eager chunked pushes issued as driver calls (``ditron/ops/raw_pushes.py``).

On CUDA they are what every eager copy-engine all-gather / reduce-scatter on one node runs
(the GPU tests of ``test_collectives.py`` cover them there). Here the driver calls are
emulated on the CPU backend, whose heaps are shared memory mapped at the addresses the
raw path computes: a copy is a ``memmove`` between those addresses, a signal write an
8-byte store, a stream wait a poll, each performed when it is issued (a valid order of
what the streams would run). So the address arithmetic and the protocol (epochs, inbox
halves, acknowledgements) are checked against torch on every rank, for several world
sizes and dtypes, chunk counts that change from call to call, all-gathers by pushes and by
pulls, all-gathers straight into a symmetric ``out`` (no inbox), reduce-scatters of every
reduction into a given or an in-place ``out``, and calls that alternate with the generic
path on the same pads and inboxes.
"""

from __future__ import annotations

import ctypes
import time
import types

import pytest
import torch

import ditron

from .poison import poison_empty
from .test_collectives import DTYPES, _close, _gather_fp32, _gen, _same, _sum_ref


class _Driver:
    """CPU stand-in for ``runtime/stream_memops.py``: each call takes effect when made."""

    def __init__(self) -> None:
        self.calls = 0

    def memcpy(self, stream: int, dst: int, src: int, nbytes: int) -> None:
        self.calls += 1
        ctypes.memmove(dst, src, nbytes)

    def write_value(self, stream: int, addr: int, value: int) -> None:
        self.calls += 1
        ctypes.c_int64.from_address(addr).value = value

    def wait_value(self, stream: int, addr: int, value: int) -> None:
        self.calls += 1
        deadline = time.monotonic() + 60
        while ctypes.c_int64.from_address(addr).value < value:
            if time.monotonic() > deadline:
                seen = ctypes.c_int64.from_address(addr).value
                raise TimeoutError(f"rank {ditron.world().rank}: wait for {value} at "
                                   f"{addr:#x}, seen {seen}")
            time.sleep(0)


def _emulate() -> tuple[_Driver, dict]:
    """Route the raw path's driver calls to :class:`_Driver`; returns it and a switch
    (``switch["raw"]``) that picks the raw or the generic path for the next calls."""
    from ditron.engines import copy_engine
    from ditron.ops import chunked_exchanges, collectives, raw_pushes

    driver = _Driver()
    switch = {"raw": True}
    raw_pushes.stream_memops = driver
    raw_pushes.current_stream = lambda device: 0
    raw_pushes.start_after = lambda side, since: None
    raw_pushes.join = lambda side: None
    copy_engine.side_stream = lambda device, lane=0: types.SimpleNamespace(cuda_stream=0)
    chunked_exchanges.usable = collectives.usable = lambda engine, graph: (
        switch["raw"] and not graph and engine == "copy_engine")
    return driver, switch


def check_raw_pushes(calls: int) -> int:
    poison_empty()
    driver, switch = _emulate()
    w, me = ditron.world().world_size, ditron.world().rank
    checks = 0
    from ditron.ops import chunked_exchanges

    for it in range(calls):
        switch["raw"] = it % 4 != 2  # every fourth call on the generic path
        chunked_exchanges.GATHER_BY = "pull" if it % 3 else "push"  # both ways, raw and generic
        before = driver.calls
        dtype = DTYPES[it % len(DTYPES)]
        g = _gen(me, it, 91)
        x = torch.randn(2 + it, 5 + 3 * it, generator=g).to(dtype)
        ref = torch.cat([p.to(dtype) for p in _gather_fp32(x)], 0)
        _same(ditron.ops.all_gather(x, 0, engine="copy_engine"), ref, f"all_gather {it}")
        xr = torch.randn(3 * w, 4 + it, generator=g).to(dtype)
        _close(ditron.ops.reduce_scatter(xr, 0, engine="copy_engine"),
               _sum_ref(xr).chunk(w, 0)[me], f"reduce_scatter {it}")
        xa = torch.randn(w * (6 + it), generator=g).to(dtype)
        _close(ditron.ops.all_reduce(xa, method="two_shot", engine="copy_engine"),
               _sum_ref(xa), f"two-shot all_reduce {it}")
        if switch["raw"]:  # the calls went through the emulated driver
            assert driver.calls > before, f"call {it}: the raw path was not taken"
        else:
            assert driver.calls == before, f"call {it}: the raw path was taken"
        # into a symmetric out: straight into the peers' out on the raw path
        out = ditron.empty(tuple(ref.shape), dtype)
        out.fill_(float("nan"))
        before = driver.calls
        assert ditron.ops.all_gather(x, 0, engine="copy_engine", out=out) is out
        _same(out, ref, f"all_gather into a symmetric out {it}")
        assert (driver.calls > before) == switch["raw"], f"call {it}: direct path or not"
        ditron.free(out)
        checks += 4
    return checks


def check_direct_disagreement() -> int:
    """Rank 0 passes a symmetric out, the others a plain one: every rank raises."""
    _emulate()
    w, me = ditron.world().world_size, ditron.world().rank
    x = torch.randn(3, 2)
    sym = ditron.empty((3 * w, 2), torch.float32)
    out = sym if me == 0 else torch.empty(3 * w, 2)
    with pytest.raises(ValueError, match="ranks disagree"):
        ditron.ops.all_gather(x, 0, engine="copy_engine", out=out)
    return 1


@pytest.mark.parametrize("world_size", [2, 3, 4])
def test_raw_pushes_emulated(monkeypatch, world_size):
    monkeypatch.setenv("DITRON_PULL_CHUNK_BYTES", "24")  # several chunks per part
    assert ditron.launch(check_raw_pushes, world_size, 8, backend="cpu") == [32] * world_size


def test_direct_all_gather_needs_every_rank():
    assert ditron.launch(check_direct_disagreement, 3, backend="cpu") == [1, 1, 1]


def check_raw_reduce_forms() -> int:
    """The raw reduce-scatter's other forms against torch: every reduction, into a given
    ``out``, in place (``out`` this rank's rows of ``x``: its own row is read from ``x``
    where the reduction writes), ``bool`` max / min (moved as bytes) and zero-sized rows;
    each call on the raw path."""
    poison_empty()
    driver, _ = _emulate()
    w, me = ditron.world().world_size, ditron.world().rank
    checks = 0
    for it, (op, dtype, rows, cols) in enumerate([
            ("sum", torch.bfloat16, 3, 7), ("avg", torch.float32, 2, 5),
            ("max", torch.float32, 3, 4), ("min", torch.bfloat16, 1, 9),
            ("max", torch.bool, 2, 6), ("min", torch.bool, 3, 3), ("sum", torch.float32, 2, 0)]):
        xs = [torch.randn(w * rows, cols, generator=_gen(q, it, 93)) for q in range(w)]
        xs = [x > 0 for x in xs] if dtype == torch.bool else [x.to(dtype) for x in xs]
        stacked = torch.stack([x.float() for x in xs])
        ref = {"sum": stacked.sum(0), "avg": stacked.mean(0), "max": stacked.amax(0),
               "min": stacked.amin(0)}[op].to(dtype)[me * rows:(me + 1) * rows]
        check = _same if dtype == torch.bool or op in ("max", "min") else _close
        before = driver.calls
        x = xs[me].clone()
        check(ditron.ops.reduce_scatter(x, op=op, engine="copy_engine"), ref, f"{op} {dtype}")
        out = torch.empty(rows, cols, dtype=dtype)
        got = ditron.ops.reduce_scatter(x, op=op, engine="copy_engine", out=out)
        assert got is out
        check(out, ref, f"{op} {dtype} into out")
        mine = x[me * rows:(me + 1) * rows]
        ditron.ops.reduce_scatter(x, op=op, engine="copy_engine", out=mine)
        check(mine, ref, f"{op} {dtype} in place")
        assert driver.calls > before, f"{op} {dtype}: the raw path was not taken"
        checks += 3
    return checks


def test_raw_reduce_scatter_forms(monkeypatch):
    monkeypatch.setenv("DITRON_PULL_CHUNK_BYTES", "16")  # several chunks per row
    assert ditron.launch(check_raw_reduce_forms, 3, backend="cpu") == [21] * 3
