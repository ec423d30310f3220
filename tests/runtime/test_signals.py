from __future__ import annotations

import gc
import weakref

import numpy as np
import pytest
import torch

import ditron
from ditron.runtime.signals import SignalPad, drop_signal_pad, free_retired_pads, retired_pads
from ditron.runtime.world import current


def _pads() -> bool:
    w = ditron.world()
    for bad in (0, -1, 2.5, "3", True):  # 0 was taken: a pad without a signal
        with pytest.raises(ValueError, match=f"ditron.signal_pad: slots must be a positive "
                                             f"int, got {bad!r}"):
            ditron.signal_pad("test.bad", bad)
    small = ditron.signal_pad("test.grow", 2)
    assert small.next_epoch() == 1 and ditron.signal_pad("test.grow", 2) is small
    big = ditron.signal_pad("test.grow", 64)  # collective: every rank grows it
    assert big is not small and big.signals.numel() == 64 and big.epoch == 0
    # the small pad stays allocated: its holders (workspaces, captured graphs) may use it
    for r in range(w.world_size):
        ditron.peer(small.signals, r)
    ditron.barrier()
    assert ditron.signal_pad("test.grow", 3) is big
    assert ditron.signal_pad("test.grow", 65).signals.numel() == 128  # at least doubled
    from ditron.ops.collectives import release_workspaces

    release_workspaces()  # frees the outgrown pads (the 2 and 64 slots), not the current one
    with pytest.raises(ValueError, match="not inside one live symmetric buffer"):
        ditron.peer(small.signals, 0)
    with pytest.raises(ValueError, match="not inside one live symmetric buffer"):
        ditron.peer(big.signals, 0)
    return ditron.signal_pad("test.grow", 100).signals.numel() == 128


@pytest.mark.parametrize("world_size", [1, 2, 3])
def test_signal_pad_slots_and_growth(backend, world_size):
    assert all(ditron.launch(_pads, world_size, backend=backend))


def _epochs() -> bool:
    pad = SignalPad(ditron.zeros((1,), torch.int64))
    assert pad.next_epoch() == 1 and pad.next_epoch(3) == 4
    assert pad.next_epoch(np.int64(2)) == 6 and type(pad.epoch) is int
    for bad in (0, -5, 2.5, True, "1"):  # -5 moved the epoch back, 2.5 made it a float
        with pytest.raises(ValueError, match=f"SignalPad.next_epoch: steps must be a positive "
                                             f"int, got {bad!r}"):
            pad.next_epoch(bad)
    assert pad.epoch == 6 and pad.next_epoch() == 7
    return True


def test_next_epoch_only_grows():
    assert ditron.launch(_epochs, 1, backend="cpu") == [True]


def _growth_and_retirement() -> list[int]:
    """A pad asked for 1..1000 slots one by one is replaced 10 times (doubling), not 999;
    the replaced pads stay allocated, and their objects (with their device-epoch cells,
    which a captured graph bumps) alive, until freed at once in the order of replacement;
    ``drop_signal_pad`` frees a key's replaced pads too."""
    rt = current()
    ditron.barrier()  # its pad made
    used = rt.heap.used_bytes
    pad = ditron.signal_pad("test.geometric", 1)
    pad.device_epoch()  # a graph-safe pad: its cell must outlive a replacement
    first = weakref.ref(pad)
    sizes = [pad.signals.numel()]
    for slots in range(2, 1001):
        grown = ditron.signal_pad("test.geometric", slots)
        if grown is not pad:
            sizes.append(grown.signals.numel())
            pad = grown
    assert sizes == [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024], sizes
    assert retired_pads() == 10
    gc.collect()
    assert first() is not None and first().has_device_epoch, "a replaced pad was dropped"
    blocks = [max(1, n * 8 // 256) for n in sizes]  # 256-byte blocks: 1 up to 32 slots
    assert rt.heap.used_bytes - used == sum(blocks) * 256
    other = ditron.signal_pad("test.other", 4)
    assert ditron.signal_pad("test.other", 5) is not other and retired_pads() == 11
    drop_signal_pad("test.other")  # its pads go, test.geometric's retired ones stay
    assert retired_pads() == 10
    assert free_retired_pads() == 10 and retired_pads() == 0
    gc.collect()
    assert first() is None
    assert rt.heap.used_bytes - used == blocks[-1] * 256  # only the current 1024-slot pad
    # every rank freed the same blocks in the same order: the next allocation agrees
    after = ditron.signal_pad("test.after", 32 * 17)
    return [rt.heap.offset_of(after.signals), *sizes]


@pytest.mark.parametrize("world_size", [1, 2])
def test_pads_grow_geometrically_and_retire(world_size):
    results = ditron.launch(_growth_and_retirement, world_size, backend="cpu")
    assert len({tuple(r) for r in results}) == 1, results


def _growth_on_a_full_heap() -> list[int]:
    """Doubling a pad that fills half the heap cannot fit: the pad grows to what is asked."""
    ditron.barrier()
    pad = ditron.signal_pad("test.half", 4000)  # 32000 bytes of a 64K heap
    grown = ditron.signal_pad("test.half", 4001)  # 8000 slots do not fit, 4001 do
    assert retired_pads() == 1 and ditron.signal_pad("test.half", 4001) is grown
    assert free_retired_pads() == 1
    return [pad.signals.numel(), grown.signals.numel()]


@pytest.mark.parametrize("world_size", [1, 2])
def test_a_pad_grows_less_where_the_heap_is_full(world_size, monkeypatch):
    monkeypatch.setenv("DITRON_HEAP_SIZE", "64K")
    assert ditron.launch(_growth_on_a_full_heap, world_size, backend="cpu") == [
        [4000, 4001]] * world_size


def _host_signals_outside() -> list[int]:
    """Host-issued signals to a slot outside the pad or a rank outside the world are refused
    before anything is written; they once wrote a word of a neighbouring buffer (a slot past
    the pad), or of an unknown address (rank -1), without a word."""
    from ditron.engines import sync

    w = ditron.world()
    pad = ditron.signal_pad("test.host_outside", 2)
    victim = ditron.signal_pad("test.host_victim", 64)
    ditron.barrier()
    peers = range(0, w.world_size)
    for call, message in (
            (lambda: sync.notify_one(pad, 40, 7, 0), "notify_one: slot 40 outside its pad's 2"),
            (lambda: sync.notify_one(pad, -1, 7, 0), "notify_one: slot -1 outside"),
            (lambda: sync.notify_one(pad, 0, 7, -1), r"notify_one: rank must be an int in \[0, "),
            (lambda: sync.notify_one(pad, 0, 7, w.world_size), "notify_one: rank must be"),
            (lambda: sync.notify_peers(pad, 2, 7, peers), "notify_peers: slot 2 outside"),
            (lambda: sync.notify_peers(pad, 0, 7, range(0, w.world_size + 1)),
             "notify_peers: ranks .* reach outside the world"),
            (lambda: sync.wait_one(pad, 2, 0), "wait_one: slot 2 outside"),
            (lambda: sync.wait_slots(pad, 2, peers, 0), "wait_slots: slots? 2 "),
            (lambda: sync.bump_and_notify(pad, 5, peers), "bump_and_notify: slot 5 outside")):
        with pytest.raises(ValueError, match=message):
            call()
    sync.notify_one(pad, 1, 7, w.world_size - 1)  # inside: raised
    ditron.barrier()
    assert victim.signals.count_nonzero() == 0
    return pad.signals.tolist()


@pytest.mark.parametrize("world_size", [1, 3])
def test_host_signals_refuse_slots_and_ranks_outside(world_size):
    results = ditron.launch(_host_signals_outside, world_size, backend="cpu")
    assert results == [[0, 0]] * (world_size - 1) + [[0, 7]]
