from __future__ import annotations

import numpy as np
import pytest
import torch

import ditron
from ditron.runtime.signals import SignalPad


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
    return ditron.signal_pad("test.grow", 3) is big


@pytest.mark.parametrize("world_size", [1, 2, 3])
def test_signal_pad_slots_and_growth(backend, world_size):
    assert all(ditron.launch(_pads, world_size, backend=backend))


def test_next_epoch_only_grows():
    pad = SignalPad(torch.zeros(1, dtype=torch.int64))
    assert pad.next_epoch() == 1 and pad.next_epoch(3) == 4
    assert pad.next_epoch(np.int64(2)) == 6 and type(pad.epoch) is int
    for bad in (0, -5, 2.5, True, "1"):  # -5 moved the epoch back, 2.5 made it a float
        with pytest.raises(ValueError, match=f"SignalPad.next_epoch: steps must be a positive "
                                             f"int, got {bad!r}"):
            pad.next_epoch(bad)
    assert pad.epoch == 6 and pad.next_epoch() == 7
