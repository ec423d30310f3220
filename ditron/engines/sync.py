"""Stream-ordered signal kernels shared by the engines and the collectives.

``notify_peers`` raises one slot of a pad on a range of peers (release, system scope);
``wait_slots`` waits until a range of the local pad's slots reach a value (acquire). Both
are ordered in the current stream and the host never blocks. On CUDA they are stream memory
operations (``runtime/stream_memops.py``: no launch, no compute unit) unless a wait timeout
is set, in which case they are the tiny Triton kernels below, whose waits can raise; on the
CPU backend the kernels run synchronously.

A value may also be a :class:`~ditron.runtime.signals.DeviceValue` (an epoch counted on the
device, for paths a CUDA graph replays): then the kernels read it when they run, and
:func:`bump` advances the pad's device epoch at the start of a use.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from .. import language as dl
from ..runtime import stream_memops
from ..runtime.integers import as_int, check_int
from ..runtime.signals import DeviceValue, SignalPad
from ..runtime.triton_launch import FastKernel
from ..runtime.world import current


@triton.jit(do_not_specialize=["slot", "value", "first", "count", "skip"])
def notify_range(sig_ptr, slot, value, first, count, skip, ctx):
    """Raise slot ``slot`` to ``value`` on ranks ``first .. first + count - 1`` but ``skip``
    (callable from kernels: device-side values)."""
    for i in range(0, count):
        if first + i != skip:
            dl.notify(sig_ptr + slot, value, first + i, ctx)


@triton.jit(do_not_specialize=["base", "first", "count", "skip", "value"])
def wait_range(sig_ptr, base, first, count, skip, value, ctx):
    """Wait until local slots ``base + r`` (``r`` in ``first .. first + count - 1``, ``r !=
    skip``) reach ``value`` (callable from kernels)."""
    for i in range(0, count):
        if first + i != skip:
            dl.wait(sig_ptr + base + first + i, value, ctx)


@triton.jit(do_not_specialize=["slot", "offset", "first", "count", "skip"])
def _notify_at(sig_ptr, slot, cell, offset, first, count, skip, ctx):
    notify_range(sig_ptr, slot, tl.load(cell) + offset, first, count, skip, ctx)


@triton.jit(do_not_specialize=["base", "first", "count", "skip", "offset"])
def _wait_at(sig_ptr, base, first, count, skip, cell, offset, ctx):
    wait_range(sig_ptr, base, first, count, skip, tl.load(cell) + offset, ctx)


@triton.jit
def _bump(cell):
    tl.store(cell, tl.load(cell) + 1)


@triton.jit(do_not_specialize=["slot", "first", "count", "skip"])
def _bump_notify(sig_ptr, slot, cell, first, count, skip, ctx):
    old = tl.load(cell)
    tl.store(cell, old + 1)
    notify_range(sig_ptr, slot, old, first, count, skip, ctx)


_FAST_BUMP = FastKernel(_bump)
_FAST_BUMP_NOTIFY = FastKernel(_bump_notify)
_FAST_NOTIFY_AT = FastKernel(_notify_at)
_FAST_WAIT_AT = FastKernel(_wait_at)
_FAST_NOTIFY_RANGE = FastKernel(notify_range)
_FAST_WAIT_RANGE = FastKernel(wait_range)


def bump(pad: SignalPad, follow: bool = True) -> DeviceValue:
    """Advance ``pad``'s device epoch by one, in stream order; returns it (the value of
    this use, as later kernels of the stream and of streams that wait for it read it).
    ``follow``: a use on another stream than the pad's previous one first waits for that
    one (eagerly; ``runtime/stream_order.py``); an op that bumps on a side stream of its
    own passes ``False``, having ordered the use on its issuing stream
    (``pad.order.follow()``)."""
    value = pad.device_epoch()
    if follow:
        pad.order.follow()
    _FAST_BUMP[(1,)](value.cell)
    return value


def _check_range(ranks: range, what: str) -> None:
    """Raise ``ValueError`` unless ``ranks`` is a range of step 1 (the kernels take its
    start and length: a step of 2 reached the wrong ranks) inside the world, or empty."""
    if not isinstance(ranks, range) or ranks.step != 1:
        raise ValueError(f"{what}: ranks must be a range of step 1, got {ranks!r}")
    if ranks and not (0 <= ranks.start and ranks.stop <= current().world.world_size):
        raise ValueError(f"{what}: ranks {ranks!r} reach outside the world of "
                         f"{current().world.world_size} ranks")


def _plain(value: object) -> object:
    """``value`` as a plain ``int`` where it is an integer argument (a NumPy integer: the
    interpreter's kernels refused one), else as it is (for the checks to refuse)."""
    if type(value) is int:
        return value
    number = as_int(value)
    return value if number is None else number


def _value(value: object, what: str) -> int | DeviceValue:
    """``value`` as the kernels and stream operations take it: a :class:`DeviceValue` as
    it is, an int64 as a plain ``int``; ``ValueError`` naming ``what`` otherwise (``1.5``
    was stored as 1, ``2**63`` wrapped to ``-2**63``: a wait for it returned at once on a
    GPU's stream and never in a kernel)."""
    if type(value) is int and -1 << 63 <= value < 1 << 63 or isinstance(value, DeviceValue):
        return value
    number = as_int(value)
    if number is None or not -1 << 63 <= number < 1 << 63:
        raise ValueError(f"{what}: signal value {value!r} is not an int64 (or a "
                         f"DeviceValue)")
    return number


def _skip(skip: object, what: str) -> int:
    """``skip`` (a rank, or -1: none) as a plain ``int``; ``ValueError`` naming ``what`` for
    anything else."""
    return skip if type(skip) is int else check_int(skip, f"{what}: skip", -1)


def _check_target(pad: SignalPad, first: int, stop: int, rank: int | None, what: str) -> None:
    """Raise ``ValueError`` unless ``pad`` is not freed (its memory may hold another buffer),
    slots ``first .. stop - 1`` lie in it (a slot past it raised a word of whatever buffer
    lies beyond, on the peer's heap) and ``rank`` (``None``: no rank) is a rank of the world
    (a kernel given another one translated its address with whatever word lay beside the
    heap bases; a stream memory operation counted a negative rank from the end)."""
    if type(first) is int and type(stop) is int and 0 <= first and stop <= pad.slots and (
            rank is None or type(rank) is int and 0 <= rank < current().world.world_size
    ) and not pad.freed:
        return  # the common case, in a few comparisons (hot path)
    if pad.freed:
        raise ValueError(f"{what}: the pad was freed (drop_signal_pad or free_retired_pads; "
                         f"its memory may hold another buffer now); get the pad again")
    lo, hi = as_int(first), as_int(stop)
    if lo is None or hi is None or lo < 0 or hi > pad.slots:
        where = f"slot {first!r}" if lo is None or hi is None or hi - lo == 1 \
            else f"slots {first!r} .. {stop - 1!r}"
        raise ValueError(f"{what}: {where} outside its pad's {pad.slots} slots")
    if rank is not None:
        check_int(rank, f"{what}: rank", 0, current().world.world_size)


def bump_and_notify(pad: SignalPad, slot: int, peers: range, skip: int = -1,
                    follow: bool = True) -> DeviceValue:
    """:func:`bump` (``follow`` as there), and set slot ``slot`` to the epoch before it
    (``E - 1``) on every rank in ``peers`` (a range of step 1) but ``skip`` (release), in
    one kernel; returns the new epoch ``E``."""
    _check_range(peers, "bump_and_notify")
    slot, skip = _plain(slot), _skip(skip, "bump_and_notify")
    _check_target(pad, slot, slot + 1, None, "bump_and_notify")
    value = pad.device_epoch()
    if follow:
        pad.order.follow()
    _FAST_BUMP_NOTIFY[(1,)](pad.signals, slot, value.cell, peers.start, len(peers), skip,
                            current().context())
    return value


def copy_value(pad: SignalPad, slot: int, value: DeviceValue, rank: int) -> None:
    """Set slot ``slot`` of ``pad`` on ``rank`` to ``value``'s cell as it is when the copy
    runs, after the current stream's work (CUDA; a copy-engine write: no kernel, no SM).
    ``value.offset`` must be 0."""
    if value.offset != 0:
        raise ValueError(f"copy_value copies a cell as it is; offset {value.offset} != 0")
    _check_target(pad, slot, slot + 1, rank, "copy_value")
    stream_memops.memcpy(_raw_stream(), slot_address(pad, slot, rank),
                         value.cell.data_ptr(), 8)


def use_stream_memops() -> bool:
    """Whether host-issued signals are stream memory operations here (CUDA, no timeout)."""
    rt = current()
    return rt.world.backend == "cuda" and rt.wait_timeout <= 0 and stream_memops.available()


def _raw_stream() -> int:
    """This thread's current CUDA stream on the rank's device, as a raw ``cudaStream_t``."""
    return torch._C._cuda_getCurrentRawStream(current().world.device.index)


def slot_address(pad: SignalPad, slot: int, rank: int) -> int:
    """Device address of ``pad``'s ``slot`` in ``rank``'s heap, as this process maps it."""
    return pad.address(rank) + 8 * slot


def notify_one(pad: SignalPad, slot: int, value: int | DeviceValue, rank: int) -> None:
    """Set slot ``slot`` of ``pad`` on ``rank`` to ``value`` after the current stream's work."""
    slot, rank, value = _plain(slot), _plain(rank), _value(value, "notify_one")
    _check_target(pad, slot, slot + 1, rank, "notify_one")
    if isinstance(value, DeviceValue):
        _FAST_NOTIFY_AT[(1,)](pad.signals, slot, value.cell, value.offset, rank, 1, -1,
                              current().context())
        return
    if use_stream_memops():
        stream = _raw_stream()
        stream_memops.write_value(stream, slot_address(pad, slot, rank), value)
        return
    _FAST_NOTIFY_RANGE[(1,)](pad.signals, slot, value, rank, 1, -1, current().context())


def wait_one(pad: SignalPad, slot: int, value: int | DeviceValue) -> None:
    """Make the current stream wait until local slot ``slot`` of ``pad`` is >= ``value``."""
    slot, value = _plain(slot), _value(value, "wait_one")
    _check_target(pad, slot, slot + 1, None, "wait_one")
    if isinstance(value, DeviceValue):
        _FAST_WAIT_AT[(1,)](pad.signals, slot, 0, 1, -1, value.cell, value.offset,
                            current().context())
        return
    if use_stream_memops():
        me = current().world.rank
        stream_memops.wait_value(_raw_stream(), slot_address(pad, slot, me), value)
        return
    _FAST_WAIT_RANGE[(1,)](pad.signals, slot, 0, 1, -1, value, current().context())


def notify_peers(pad: SignalPad, slot: int, value: int | DeviceValue, peers: range,
                 skip: int = -1) -> None:
    """Set slot ``slot`` of ``pad`` to ``value`` on every rank in ``peers`` (a range of step
    1) except ``skip``."""
    _check_range(peers, "notify_peers")
    if len(peers) == 0:
        return
    slot, value = _plain(slot), _value(value, "notify_peers")
    skip = _skip(skip, "notify_peers")
    # before the one peer is found skipped: a world of one refuses what a larger one does
    _check_target(pad, slot, slot + 1, None, "notify_peers")
    if len(peers) == 1 and peers[0] == skip:
        return
    if isinstance(value, DeviceValue):
        _FAST_NOTIFY_AT[(1,)](pad.signals, slot, value.cell, value.offset, peers.start,
                              len(peers), skip, current().context())
        return
    if use_stream_memops():
        stream = _raw_stream()
        for q in peers:
            if q != skip:
                stream_memops.write_value(stream, slot_address(pad, slot, q), value)
        return
    _FAST_NOTIFY_RANGE[(1,)](pad.signals, slot, value, peers.start, len(peers), skip,
                             current().context())


def wait_slots(pad: SignalPad, base: int, ranks: range, value: int | DeviceValue,
               skip: int = -1) -> None:
    """Wait until local slots ``base + r`` (``r`` in ``ranks``, a range of step 1, ``r !=
    skip``) are >= ``value``."""
    _check_range(ranks, "wait_slots")
    if len(ranks) == 0:
        return
    base, value = _plain(base), _value(value, "wait_slots")
    skip = _skip(skip, "wait_slots")
    _check_target(pad, base + ranks.start, base + ranks.stop, None, "wait_slots")
    if len(ranks) == 1 and ranks[0] == skip:
        return
    if isinstance(value, DeviceValue):
        _FAST_WAIT_AT[(1,)](pad.signals, base, ranks.start, len(ranks), skip, value.cell,
                            value.offset, current().context())
        return
    if use_stream_memops():
        stream = _raw_stream()
        me = current().world.rank
        for r in ranks:
            if r != skip:
                stream_memops.wait_value(stream, slot_address(pad, base + r, me), value)
        return
    _FAST_WAIT_RANGE[(1,)](pad.signals, base, ranks.start, len(ranks), skip, value,
                           current().context())
