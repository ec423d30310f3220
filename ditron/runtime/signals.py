"""Signal pads and their reuse protocol.

A :class:`SignalPad` is a symmetric int64 array plus a host-side epoch counter. Each use of
the pad (one collective call, one barrier) takes a fresh epoch with :meth:`next_epoch`;
producers ``notify(..., epoch, op="set")`` (or ``op="add"`` with 1, and consumers wait for
``epoch * producers``) and consumers ``wait(sig, epoch)``. Values only grow, so no reset is
ever needed and a notify for epoch ``e + 1`` that arrives while a slow consumer still waits
for ``e`` satisfies it without harm. Every rank must use a pad in the same order, so their
epochs agree: pads belong to collective operations.
"""

from __future__ import annotations

import dataclasses

import torch

from .world import current


@dataclasses.dataclass
class SignalPad:
    """``slots`` int64 signals in the symmetric heap, all starting at 0."""

    signals: torch.Tensor
    epoch: int = 0

    @classmethod
    def allocate(cls, slots: int, name: str) -> SignalPad:
        rt = current()
        signals = rt.heap.alloc((slots,), torch.int64, name)
        signals.zero_()
        return cls(signals)

    def next_epoch(self, steps: int = 1) -> int:
        """Advance and return the epoch (the value this use's signals must reach)."""
        self.epoch += steps
        return self.epoch


def signal_pad(key: str, slots: int) -> SignalPad:
    """The process's pad named ``key`` with at least ``slots`` signals, made on first use.

    Collective on first use (it allocates); later calls return the cached pad. A pad that
    is too small is replaced by a larger one (collective again).
    """
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
