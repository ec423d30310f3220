"""Host-issued signals (``engines/sync.py``) take their integer arguments as the engines do:
NumPy integers as ints, signal values only as int64 (or a DeviceValue), and a world of one
rank refuses the slot a larger world refuses."""

from __future__ import annotations

import numpy as np
import pytest

import ditron
from ditron.engines import sync


def check_numpy_arguments() -> list[int]:
    """Every host signal with NumPy slots, ranks, values and skips; returns this rank's
    slots afterwards."""
    w = ditron.world()
    me, size = w.rank, w.world_size
    pad = ditron.signal_pad("test_host_numpy", 4)
    ditron.barrier()
    right = (me + 1) % size
    sync.notify_one(pad, np.int64(0), np.int64(3), np.int32(right))
    sync.wait_one(pad, np.int64(0), np.int64(3))
    sync.notify_peers(pad, np.int16(1), np.int64(5), range(size), skip=np.int64(me))
    sync.wait_slots(pad, np.int64(1), range(0, 1), np.int64(5 if size > 1 else 0))
    sync.bump_and_notify(pad, np.int64(2), range(size), skip=np.int64(-1))
    sync.wait_slots(pad, 2, range(0, 1), pad.device_epoch() - 1)
    ditron.barrier()
    return pad.signals.tolist()


@pytest.mark.parametrize("world_size", [1, 3])
def test_host_signals_take_numpy_integers(world_size):
    # before: the interpreter's kernels refused each NumPy integer ("cannot convert 3 of
    # type <class 'numpy.int64'> to tensor"), which the checks had let through
    got = ditron.launch(check_numpy_arguments, world_size, backend="cpu")
    assert got == [[3, 5 if world_size > 1 else 0, 0, 0]] * world_size


def check_bad_values() -> tuple[list[str], list[int]]:
    """Values that are not int64 through every host signal: the errors, and this rank's
    slots afterwards (nothing may be written, nothing waited for)."""
    w = ditron.world()
    pad = ditron.signal_pad("test_host_values", 2)
    pad.signals[1].fill_(5)
    ditron.barrier()
    ditron.set_wait_timeout(0.5)
    errors = []
    for value in (1.5, 1 << 63, -(1 << 63) - 1, True, "3"):
        for what, call in (
                ("notify_one", lambda v=value: sync.notify_one(pad, 0, v, w.rank)),
                ("notify_peers", lambda v=value: sync.notify_peers(pad, 0, v,
                                                                   range(w.world_size))),
                ("wait_one", lambda v=value: sync.wait_one(pad, 1, v)),
                ("wait_slots", lambda v=value: sync.wait_slots(pad, 1, range(0, 1), v))):
            with pytest.raises(ValueError, match=f"{what}: signal value") as info:
                call()
            errors.append(str(info.value))
    ditron.check_waits()
    with pytest.raises(ValueError, match=r"notify_peers: skip must be an int >= -1, got 0.0"):
        sync.notify_peers(pad, 0, 1, range(w.world_size), skip=0.0)
    ditron.barrier()
    return errors, pad.signals.tolist()


def test_host_signals_refuse_values_that_are_not_int64():
    # before: 1.5 was stored as 1, 2**63 as -2**63 (and a wait for it ran until the wait
    # timeout: "expected >= -9223372036854775808, saw 5"), True and -2**63 - 1 failed
    # inside the kernel launch
    got = ditron.launch(check_bad_values, 2, backend="cpu")
    for errors, slots in got:
        assert len(errors) == 20 and slots == [0, 5]
        assert errors[:2] == ["notify_one: signal value 1.5 is not an int64 (or a DeviceValue)",
                              "notify_peers: signal value 1.5 is not an int64 (or a "
                              "DeviceValue)"]


def check_skipped_slot_outside() -> list[str]:
    """A slot outside the pad, with the one peer of the range skipped: refused in a world
    of one rank as in a larger one."""
    me = ditron.world().rank
    pad = ditron.signal_pad("test_host_skipped", 2)
    errors = []
    for call in (lambda: sync.notify_peers(pad, 2, 7, range(me, me + 1), skip=me),
                 lambda: sync.wait_slots(pad, 2, range(me, me + 1), 7, skip=me)):
        with pytest.raises(ValueError, match="outside its pad's 2 slots") as info:
            call()
        errors.append(str(info.value).split(":")[0])
    return errors


@pytest.mark.parametrize("world_size", [1, 2])
def test_host_signals_refuse_a_slot_outside_when_the_one_peer_is_skipped(world_size):
    # before: returned without a check where the range held only the skipped rank (every
    # rank of a world of one), so a bad slot raised only in larger worlds
    got = ditron.launch(check_skipped_slot_outside, world_size, backend="cpu")
    assert got == [["notify_peers", "wait_slots"]] * world_size
