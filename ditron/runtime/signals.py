"""Signal pads and their reuse protocol.

A :class:`SignalPad` is a symmetric int64 array plus a host-side epoch counter. Each use of
the pad (one collective call, one barrier) takes a fresh epoch with :meth:`next_epoch`;
producers ``notify(..., epoch, op="set")`` (or ``op="add"`` with 1, and consumers wait for
``epoch * producers``) and consumers ``wait(sig, epoch)``. Values only grow, so no reset is
ever needed and a notify for epoch ``e + 1`` that arrives while a slow consumer still waits
for ``e`` satisfies it without harm. Every rank must use a pad in the same order, so their
epochs agree: pads belong to collective operations.

The same protocol with the epoch counted on the device (what a CUDA graph replays): a pad's
:meth:`SignalPad.device_epoch` is a local int64 cell that a one-program kernel bumps at the
start of each use (``engines/sync.py``: ``bump``), and signal values are
:class:`DeviceValue` s, read from the cell by the kernels that set or wait for them.
"""

from __future__ import annotations

import dataclasses

import torch

from .cuda_graphs import capturing
from .integers import check_int
from .world import current


@dataclasses.dataclass(frozen=True, eq=False)
class DeviceValue:
    """A signal value known only on the device: ``cell[0] + offset`` at the time the kernel
    that sets or waits for the signal runs (``cell``: a pad's device epoch)."""

    cell: torch.Tensor
    offset: int = 0

    def __add__(self, k: int) -> DeviceValue:
        return DeviceValue(self.cell, self.offset + k)

    def __sub__(self, k: int) -> DeviceValue:
        return DeviceValue(self.cell, self.offset - k)


def host_value(value: int | DeviceValue) -> int:
    """``value`` as an int, reading a :class:`DeviceValue`'s cell (a host sync on GPU; the
    CPU backend's copy worker uses it, where kernels have already run)."""
    if isinstance(value, DeviceValue):
        return int(value.cell.item()) + value.offset
    return value


@dataclasses.dataclass
class SignalPad:
    """``slots`` int64 signals in the symmetric heap, all starting at 0."""

    signals: torch.Tensor
    epoch: int = 0
    _cell: torch.Tensor | None = None
    _addresses: dict = dataclasses.field(default_factory=dict, repr=False)

    def address(self, rank: int) -> int:
        """Device address of slot 0 in ``rank``'s heap, as this process maps it (the
        mapping never moves, so it is computed once per rank)."""
        addr = self._addresses.get(rank)
        if addr is None:
            heap = current().heap
            addr = self._addresses[rank] = heap.mapping.bases[rank] + heap.offset_of(
                self.signals)
        return addr

    @property
    def has_device_epoch(self) -> bool:
        return self._cell is not None

    @torch.inference_mode(False)  # state kept across calls (runtime/heap.py)
    def device_epoch(self) -> DeviceValue:
        """The pad's epoch counted on the device (a local int64 cell, 0 when made; made on
        first use, which cannot happen while a CUDA graph is being captured). Bump it with
        ``engines.sync.bump`` at the start of each use; a pad uses either this or
        :meth:`next_epoch`, never both."""
        if self._cell is None:
            if capturing():
                raise RuntimeError("ditron: a device epoch cannot be made while a CUDA graph "
                                   "is being captured; run the op once before capturing")
            self._cell = torch.zeros(1, dtype=torch.int64, device=self.signals.device)
        return DeviceValue(self._cell)

    @classmethod
    def allocate(cls, slots: int, name: str) -> SignalPad:
        rt = current()
        signals = rt.heap.alloc((slots,), torch.int64, name)
        signals.zero_()
        return cls(signals)

    def next_epoch(self, steps: int | None = None) -> int:
        """Advance the epoch by ``steps`` (a positive int; 1 when left out) and return it (the
        value this use's signals must reach). Epochs only grow: a step < 1 is refused."""
        if steps is None:  # the hot path: no check to make
            self.epoch += 1
        else:
            self.epoch += check_int(steps, "SignalPad.next_epoch: steps", minimum=1)
        return self.epoch


def signal_pad(key: str, slots: int) -> SignalPad:
    """The process's pad named ``key`` with at least ``slots`` signals, made on first use.

    Collective on first use (it allocates); later calls return the cached pad. A pad that
    is too small is replaced by a larger one (collective again), whose epochs start from 0.
    The old pad is not freed: its holders may still use it (cached workspaces keep its
    signals, CUDA graphs captured with it replay into it); :func:`drop_signal_pad` frees.
    """
    slots = check_int(slots, "ditron.signal_pad: slots", minimum=1)
    rt = current()
    pad = rt.cache.get(("signal_pad", key))
    if pad is None or pad.signals.numel() < slots:
        pad = SignalPad.allocate(slots, name=f"signals:{key}")
        rt.cache[("signal_pad", key)] = pad
        from .barrier import barrier

        barrier()  # peers must see the zeroed pad before anyone notifies into it
    return pad


def drop_signal_pad(key: str) -> None:
    """Free the pad named ``key`` (collective; nobody may still signal into it). A later
    ``signal_pad(key, ...)`` makes a fresh zeroed pad, so its users must restart their
    epochs too."""
    rt = current()
    pad = rt.cache.pop(("signal_pad", key), None)
    if pad is not None:
        rt.heap.free(pad.signals)
