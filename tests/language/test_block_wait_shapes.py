"""``dl.wait_all`` on blocks of any shape: a 2-D tile of signals (rows x chunks) waits for
every lane, times out naming the lowest-addressed short signal, and a block of targets is
refused when compiled. A 2-D block once spun forever on the CPU backend (a block condition,
which the interpreter takes as true), even with every signal set and a timeout."""

from __future__ import annotations

import pytest
import torch
import triton
import triton.language as tl

import ditron
import ditron.language as dl

ROWS, COLS = 2, 3


@triton.jit(do_not_specialize=["epoch"])
def _push_tile_then_wait(data, sig, epoch, out, ctx, R: tl.constexpr, C: tl.constexpr,
                         RB: tl.constexpr, CB: tl.constexpr):
    """Store ``epoch * (1 + slot)`` into the right neighbour's ``data`` tile (``R x C``, in a
    ``RB x CB`` block) and raise each of its signals; then wait for the own tile's signals
    and copy the tile into ``out[1:]`` (``out[0]``: the least signal seen)."""
    r = tl.arange(0, RB)[:, None]
    c = tl.arange(0, CB)[None, :]
    mask = (r < R) & (c < C)
    slot = r * C + c
    right = (ctx.rank + 1) % ctx.world_size
    dl.store(data + slot, tl.load(data + R * C + slot, mask=mask), right, ctx, mask=mask)
    i = 0
    while i < R * C:
        dl.notify(sig + i, epoch, right, ctx)
        i += 1
    tl.store(out, dl.wait_all(sig + slot, epoch, ctx, mask=mask))
    tl.store(out + 1 + slot, tl.load(data + slot, mask=mask), mask=mask)


def _tile_exchange(repeats: int) -> bool:
    w = ditron.world()
    data = ditron.empty((2 * ROWS * COLS,), torch.float32, name="tile.data")  # [in | own]
    pad = ditron.signal_pad("test.tile_wait", ROWS * COLS)
    out = torch.empty(1 + ROWS * COLS, dtype=torch.float32, device=w.device)
    left = (w.rank - 1) % w.world_size
    for it in range(repeats):
        gen = torch.Generator().manual_seed(300 + it)
        tiles = torch.randn(w.world_size, ROWS * COLS, generator=gen)
        data[ROWS * COLS:] = tiles[w.rank]
        data[:ROWS * COLS] = float("nan")
        out.fill_(float("nan"))
        epoch = pad.next_epoch()
        ditron.barrier()
        _push_tile_then_wait[(1,)](data, pad.signals, epoch, out, ditron.context(), ROWS,
                                   COLS, 2, 4)
        ditron.check_waits()
        assert out[0].item() == epoch, f"iteration {it}: least {out[0].item()} != {epoch}"
        assert torch.equal(out[1:].cpu(), tiles[left]), f"iteration {it}"
        ditron.barrier()
    return True


@pytest.mark.parametrize("world_size", [1, 3])
def test_wait_all_on_a_2d_tile_of_signals(backend, world_size, monkeypatch):
    monkeypatch.setenv("DITRON_LAUNCH_TIMEOUT", "90")  # the old code never returned
    assert all(ditron.launch(_tile_exchange, world_size, 2, backend=backend))


@triton.jit
def _wait_columns(sig, value, out, ctx, R: tl.constexpr, C: tl.constexpr):
    """Wait on the ``R x C`` signals laid out column by column (lane (0, 1) is slot R)."""
    r = tl.arange(0, R)[:, None]
    c = tl.arange(0, C)[None, :]
    tl.store(out, dl.wait_all(sig + c * R + r, value, ctx))


@triton.jit
def _wait_for_targets(sig, ctx, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    dl.wait_all(sig + offs, offs, ctx)


def _short_tile() -> tuple:
    pad = ditron.signal_pad("test.tile_short", 8)
    out = torch.zeros(1, dtype=torch.int64, device=ditron.world().device)
    pad.signals[:] = torch.tensor([9, 4, 9, 9, 2, 9, 9, 9])  # short: slots 1 (4) and 4 (2)
    ditron.set_wait_timeout(0.3)
    with pytest.raises(ditron.WaitTimeoutError) as info:
        _wait_columns[(1,)](pad.signals, 5, out, ditron.context(), 2, 4)
        ditron.check_waits()
    exc = info.value
    least = int(out.item())
    pad.signals.fill_(5)  # every lane set: returns at once with the least value
    _wait_columns[(1,)](pad.signals, 5, out, ditron.context(), 2, 4)
    ditron.check_waits()
    with pytest.raises(Exception) as refused:
        _wait_for_targets[(1,)](pad.signals, ditron.context(), 4)
    chain, error = [], refused.value  # compiled: the message is in the error's cause
    while error is not None:
        chain.append(str(error))
        error = error.__cause__ or error.__context__
    assert any("dl.wait_all: value must be a scalar" in m for m in chain), chain
    return exc.rank, exc.signal, exc.expected, exc.seen, least, int(out.item())


def test_2d_block_wait_timeout_and_targets(backend, monkeypatch):
    """The record names the lowest-addressed short signal (slot 1, holding 4: neither the
    first short lane's, slot 4, nor the least value); the kernel gets the least (2)."""
    monkeypatch.setenv("DITRON_LAUNCH_TIMEOUT", "90")
    assert ditron.launch(_short_tile, 1, backend=backend) == [
        (0, "signals:test.tile_short[1]", 5, 4, 2, 5)]
