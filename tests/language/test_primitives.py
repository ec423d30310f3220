"""Every primitive across world sizes 1-4, with exact expected values from torch."""

from __future__ import annotations

import time

import pytest
import torch
import triton

import ditron

from .kernels import (
    all_to_all_tiles,
    count_up,
    exchange_ops,
    get_from_left,
    notify_self,
    pull_ring,
    push_lanes,
    push_ring,
    self_translate,
    wait_lanes_then_read,
)

WORLD_SIZES = [1, 2, 3, 4]


def _same_draw(world_size: int, *shape: int, seed: int, dtype=torch.float32) -> torch.Tensor:
    """All ranks' data drawn from one seed: each rank knows the others' data for checking."""
    gen = torch.Generator().manual_seed(seed)
    return torch.randn(world_size, *shape, generator=gen).to(dtype)


def _push_and_pull(n: int, repeats: int, dtype: torch.dtype = torch.float32) -> bool:
    w = ditron.world()
    src = ditron.empty((n,), dtype, name="src")
    dst = ditron.empty((n,), dtype, name="dst")
    pulled = torch.empty(n, device=w.device, dtype=dtype)
    pad = ditron.signal_pad("test.push", 1)
    left = (w.rank - 1) % w.world_size
    block = triton.next_power_of_2(n)
    for it in range(repeats):
        data = _same_draw(w.world_size, n, seed=100 + it)
        data = (data > 0) if dtype == torch.bool else (data * 100).to(dtype)
        src.copy_(data[w.rank].to(w.device))
        dst.copy_(~data[left] if dtype == torch.bool else data[left] + 1)  # not the answer
        pulled.copy_(dst)
        ditron.barrier()
        push_ring[(1,)](src, dst, pad.signals, pad.next_epoch(), n, BLOCK=block,
                        ctx=ditron.context())
        pull_ring[(1,)](src, pulled, n, BLOCK=block, ctx=ditron.context())
        ditron.check_waits()
        assert torch.equal(dst.cpu(), data[left]), f"push, iteration {it}"
        assert torch.equal(pulled.cpu(), data[left]), f"pull, iteration {it}"
        ditron.barrier()
    return True


@pytest.mark.parametrize("world_size", WORLD_SIZES)
def test_push_and_pull_ring(backend, world_size):
    assert all(ditron.launch(_push_and_pull, world_size, 37, 3, backend=backend))


@pytest.mark.parametrize("dtype", [torch.bool, torch.int8, torch.int16, torch.float64])
def test_push_and_pull_ring_of_other_dtypes(backend, dtype):
    """Remote addresses move by whole elements of any width (bool elements take a byte:
    its pointers were once not moved at all, so a push wrote the own copy)."""
    assert all(ditron.launch(_push_and_pull, 3, 37, 2, dtype, backend=backend))


def _all_to_all(tile: int, repeats: int) -> bool:
    w = ditron.world()
    ws = w.world_size
    src = ditron.empty((ws * tile,), torch.float32)
    dst = ditron.empty((ws * tile,), torch.float32)
    pad = ditron.signal_pad("test.a2a", ws)
    for it in range(repeats):
        data = _same_draw(ws, ws, tile, seed=200 + it)  # data[r][p]: rank r's tile for p
        src.copy_(data[w.rank].reshape(-1).to(w.device))
        dst.fill_(float("nan"))
        ditron.barrier()
        all_to_all_tiles[(ws,)](src, dst, pad.signals, pad.next_epoch(), TILE=tile,
                                ctx=ditron.context())
        ditron.check_waits()
        assert torch.equal(dst.cpu().reshape(ws, tile), data[:, w.rank]), f"iteration {it}"
        ditron.barrier()
    return True


def _late_signals(n: int, repeats: int) -> bool:
    """Rank 0 pushes to rank 1 only after a pause, so rank 1's block wait polls; it must
    return the signals' value and then see every store made before each notify."""
    w = ditron.world()
    data = ditron.empty((n,), torch.int64, name="late.data")
    pad = ditron.signal_pad("test.late", n)
    out = torch.empty(n + 1, dtype=torch.int64, device=w.device)
    block = triton.next_power_of_2(n)
    for it in range(repeats):
        epoch = pad.next_epoch()
        data.fill_(-1)
        out.fill_(-2)
        ditron.barrier()
        if w.rank == 0:
            time.sleep(0.2)
        push_lanes[(1,)](data, pad.signals, epoch, n, ctx=ditron.context())
        wait_lanes_then_read[(1,)](pad.signals, data, epoch, n, out, BLOCK=block,
                                   ctx=ditron.context())
        ditron.check_waits()
        want = torch.tensor([epoch] + [epoch * (i + 1) for i in range(n)])
        assert torch.equal(out.cpu(), want), f"iteration {it}: {out.cpu()} != {want}"
        ditron.barrier()
    return True


@pytest.mark.parametrize("world_size", WORLD_SIZES)
def test_block_wait_polls_until_late_signals(backend, world_size):
    assert all(ditron.launch(_late_signals, world_size, 5, 3, backend=backend))


@pytest.mark.parametrize("world_size", WORLD_SIZES)
def test_all_to_all_of_tiles(backend, world_size):
    assert all(ditron.launch(_all_to_all, world_size, 16, 3, backend=backend))


def _counters(programs: int, per_program: int, repeats: int) -> list[int]:
    counter = ditron.zeros((1,), torch.int64, name="counter")
    ditron.barrier()
    seen = []
    for _ in range(repeats):
        count_up[(programs,)](counter, ditron.context(), PER_PROGRAM=per_program)
        ditron.barrier()
        seen.append(int(counter.item()))
        ditron.barrier()  # everyone has read before the next round adds again
    return seen


@pytest.mark.parametrize("world_size", WORLD_SIZES)
def test_atomic_counters(backend, world_size):
    programs, per_program, repeats = 3, 2, 3
    results = ditron.launch(_counters, world_size, programs, per_program, repeats,
                            backend=backend)
    step = world_size * programs * per_program
    assert results == [[step * (i + 1) for i in range(repeats)]] * world_size


def _notify_ops() -> list:
    """A signal set, then added to; then an op that is neither (refused when compiled)."""
    pad = ditron.signal_pad("test.notify_ops", 1)
    seen = []
    for op, value in (("set", 5), ("add", 3), ("set", 7)):
        notify_self[(1,)](pad.signals, value, ditron.context(), OP=op)
        seen.append(int(pad.signals[0]))
    for op in ("ADD", "max"):  # a typo once set the value: counters then never completed
        with pytest.raises(Exception) as info:
            notify_self[(1,)](pad.signals, 1, ditron.context(), OP=op)
        chain, exc = [], info.value  # compiled: the message is in the compile error's cause
        while exc is not None:
            chain.append(str(exc))
            exc = exc.__cause__ or exc.__context__
        assert any("dl.notify: op must be set or add" in m for m in chain), chain
    return seen


def test_notify_set_add_and_nothing_else(backend):
    assert ditron.launch(_notify_ops, 1, backend=backend) == [[5, 8, 7]]


def _exchange() -> tuple[list[int], list[int]]:
    w = ditron.world()
    cells = ditron.zeros((4,), torch.int64, name="cells")
    cells[2] = -1
    cells[3] = 5
    out = torch.full((4,), -7, dtype=torch.int64, device=w.device)
    ditron.barrier()
    exchange_ops[(1,)](cells, out, ditron.context())
    ditron.barrier()
    return out.tolist(), cells.tolist()


@pytest.mark.parametrize("world_size", WORLD_SIZES)
def test_cas_xchg_max(backend, world_size):
    results = ditron.launch(_exchange, world_size, backend=backend)
    for rank, (old, cells) in enumerate(results):
        left = (rank - 1) % world_size
        assert old == [0, 0, -1, 5]  # the values before this rank's operations
        assert cells == [left + 10, 0, left + 100, max(5, left + 1000)]


def _translate() -> list[int]:
    x = ditron.empty((4,), torch.float32)
    out = torch.zeros(3, dtype=torch.int64, device=ditron.world().device)
    self_translate[(1,)](x, out, ditron.context())
    return out.tolist()


@pytest.mark.parametrize("world_size", [1, 3])
def test_self_translation_is_identity(backend, world_size):
    results = ditron.launch(_translate, world_size, backend=backend)
    assert results == [[1, r, world_size] for r in range(world_size)]


def _bulk_get(n: int, block: int) -> bool:
    w = ditron.world()
    src = ditron.empty((n,), torch.float32)
    data = _same_draw(w.world_size, n, seed=300)
    src.copy_(data[w.rank].to(w.device))
    dst = torch.full((n + 1,), float("nan"), device=w.device)
    ditron.barrier()
    get_from_left[(1,)](src, dst, n, BLOCK=block, ctx=ditron.context())
    left = (w.rank - 1) % w.world_size
    assert torch.equal(dst[:n].cpu(), data[left]) and torch.isnan(dst[n]).item()
    ditron.barrier()
    return True


@pytest.mark.parametrize("world_size", [1, 3])
def test_bulk_get(backend, world_size):
    # 100 elements in blocks of 32: the last block is partial; dst[n] must stay untouched.
    assert all(ditron.launch(_bulk_get, world_size, 100, 32, backend=backend))
