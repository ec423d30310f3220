"""A ``SignalPad`` is made only over signals every primitive can use, and its epochs stay
within its int64 signals."""

from __future__ import annotations

import pytest
import torch

import ditron
from ditron.engines import sync
from ditron.runtime.signals import SignalPad


def _bad_signals() -> list[int]:
    """Each tensor below was once taken as a pad: a host notify to its last slot then wrote
    an int32 pad's neighbour word (CUDA: 8 bytes at ``8 * slot``), a word of a strided pad
    that no wait reads, crashed the process (a plain tensor) or raised an IndexError (0-d),
    an InterpreterError (float64) or a slot -1 error (empty)."""
    w = ditron.world()
    cases = {
        "int32": ditron.zeros((4,), torch.int32),
        "float64": ditron.zeros((4,), torch.float64),
        "2-D": ditron.zeros((2, 4), torch.int64),
        "strided": ditron.zeros((8,), torch.int64)[::2],
        "0-d": ditron.zeros((), torch.int64),
        "empty": ditron.zeros((0,), torch.int64),
    }
    for name, t in cases.items():
        try:
            SignalPad(t)
        except ValueError as e:
            assert str(e).startswith("ditron.SignalPad: signals must be a non-empty, "
                                     "contiguous 1-D int64 tensor, got "), (name, e)
        else:
            raise AssertionError(f"{name} signals taken as a pad")
    with pytest.raises(ValueError, match="ditron.SignalPad: signals must lie in the "
                                         "symmetric heap"):
        SignalPad(torch.zeros(4, dtype=torch.int64, device=w.device))
    freed = ditron.zeros((4,), torch.int64)
    ditron.free(freed)
    with pytest.raises(ValueError, match="must lie in the symmetric heap"):
        SignalPad(freed)
    with pytest.raises(ValueError, match="ditron.SignalPad: signals must be a torch.Tensor"):
        SignalPad([0, 0])
    good = ditron.zeros((8,), torch.int64)
    for epoch in (-1, 2.0, 2**63):
        with pytest.raises(ValueError, match="ditron.SignalPad: epoch must be an int in"):
            SignalPad(good, epoch)
    pad = SignalPad(good[2:5])  # a contiguous part of a buffer is a pad of its own
    ditron.barrier()
    sync.notify_one(pad, pad.slots - 1, 7 + w.rank, (w.rank + 1) % w.world_size)
    ditron.barrier()
    return good.tolist()


@pytest.mark.parametrize("world_size", [1, 2])
def test_a_pad_refuses_signals_it_cannot_use(world_size):
    results = ditron.launch(_bad_signals, world_size, backend="cpu")
    for rank, got in enumerate(results):
        assert got == [0, 0, 0, 0, 7 + (rank - 1) % world_size, 0, 0, 0], (rank, got)


def _epochs_near_the_end() -> list[int]:
    """Epochs past ``2**63 - 1`` once wrapped: the notify stored a negative value and the
    waits for the epochs after it passed at once. They are refused; the pad stays usable
    up to the last epoch that fits."""
    pad = ditron.signal_pad("test.near_end", 1)
    pad.epoch = 2**63 - 3
    assert pad.next_epoch() == 2**63 - 2 and pad.next_epoch() == 2**63 - 1
    with pytest.raises(RuntimeError, match="epoch 9223372036854775808 does not fit"):
        pad.next_epoch()
    assert pad.epoch == 2**63 - 1
    with pytest.raises(RuntimeError, match="does not fit"):
        pad.next_epoch(2**70)
    with pytest.raises(ValueError, match="steps must be a positive int"):
        pad.next_epoch(0)
    sync.notify_one(pad, 0, pad.epoch, ditron.world().rank)
    sync.wait_one(pad, 0, pad.epoch)
    ditron.check_waits()
    return [pad.epoch, int(pad.signals[0])]


def test_epochs_stop_at_the_largest_int64():
    assert ditron.launch(_epochs_near_the_end, 1, backend="cpu") == [[2**63 - 1] * 2]
