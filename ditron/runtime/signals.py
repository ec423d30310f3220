"""Signal pads and their reuse protocol.

A :class:`SignalPad` is a symmetric int64 array plus a host-side epoch counter. Each use of
the pad (one collective call, one barrier) takes a fresh epoch with :meth:`next_epoch`;
producers ``notify(..., epoch, op="set")`` (or ``op="add"`` with 1, and consumers wait for
``epoch * producers``) and consumers ``wait(sig, epoch)``. Values only grow, so no reset is
ever needed and a notify for epoch ``e + 1`` that arrives while a slow consumer still waits
for ``e`` satisfies it without harm. Every rank must use a pad in the same order, so their
epochs agree: pads belong to collective operations. :func:`signal_pad` keeps one pad per
name; a pad it outgrows is retired (kept allocated for whoever still uses it) until
:func:`free_retired_pads` (``release_workspaces``).

The same protocol with the epoch counted on the device (what a CUDA graph replays): a pad's
:meth:`SignalPad.device_epoch` is a local int64 cell that a one-program kernel bumps at the
start of each use (``engines/sync.py``: ``bump``), and signal values are
:class:`DeviceValue` s, read from the cell by the kernels that set or wait for them.
"""

from __future__ import annotations

import dataclasses

import torch

from .cuda_graphs import capturing
from .heap import HeapExhausted
from .integers import check_int
from .stream_order import StreamOrder
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


#: epochs are int64 signal values: they stay below this
_EPOCH_END = 2**63


@dataclasses.dataclass
class SignalPad:
    """``slots`` int64 signals in the symmetric heap, all starting at 0.

    ``signals`` must be a non-empty, contiguous 1-D int64 tensor inside one live buffer of
    the current world's symmetric heap (``ditron.zeros``); anything else is refused with a
    ``ValueError`` when the pad is made (host-issued signals write 8-byte words at
    ``address + 8 * slot`` on every rank: a narrower dtype or a stride wrote past the
    buffer or beside the slot a wait reads, a plain tensor crashed the process)."""

    signals: torch.Tensor
    epoch: int = 0
    _cell: torch.Tensor | None = None
    _addresses: dict = dataclasses.field(default_factory=dict, repr=False)
    #: how many signals (``signals.shape[0]``, kept for the host-side checks of hot paths)
    slots: int = dataclasses.field(init=False)
    #: set when :func:`drop_signal_pad` or :func:`free_retired_pads` frees the pad: engines
    #: and ``engines.sync`` then refuse it (its memory may already hold another buffer)
    freed: bool = dataclasses.field(default=False, init=False, repr=False)
    #: the stream of the pad's previous use (``stream_order.py``)
    order: StreamOrder = dataclasses.field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        t = self.signals
        if not isinstance(t, torch.Tensor):
            raise ValueError(f"ditron.SignalPad: signals must be a torch.Tensor, got "
                             f"{type(t).__name__}")
        if t.dtype != torch.int64 or t.dim() != 1 or t.numel() == 0 or not t.is_contiguous():
            raise ValueError(f"ditron.SignalPad: signals must be a non-empty, contiguous "
                             f"1-D int64 tensor, got {t.dtype} of shape {tuple(t.shape)} "
                             f"and strides {t.stride()}")
        if not current().heap.contains(t):
            raise ValueError("ditron.SignalPad: signals must lie in the symmetric heap (of "
                             "the current world, inside one live buffer): make them with "
                             "ditron.zeros((slots,), torch.int64), or use ditron.signal_pad")
        self.epoch = check_int(self.epoch, "ditron.SignalPad: epoch", 0, _EPOCH_END)
        self.slots = t.shape[0]
        self.order = StreamOrder(t.device)

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
        # from the heap's top: pads live long, and placed between the workspaces they would
        # split the space that evicting the workspaces frees
        signals = rt.heap.alloc((slots,), torch.int64, name, from_top=True)
        signals.zero_()
        return cls(signals)

    def next_epoch(self, steps: int | None = None) -> int:
        """Advance the epoch by ``steps`` (a positive int; 1 when left out) and return it (the
        value this use's signals must reach). Epochs only grow: a step < 1 is refused, and
        so is an epoch past ``2**63 - 1`` (``RuntimeError``; an int64 signal cannot hold it:
        its notify wrapped to a negative value and the waits after it passed at once).

        On CUDA, a use issued on another stream than the pad's previous use first makes the
        current stream wait for that one (``order``): a pad's uses follow each other in one
        stream order per rank."""
        if steps is None:  # the hot path: one comparison
            epoch = self.epoch + 1
        else:
            epoch = self.epoch + check_int(steps, "SignalPad.next_epoch: steps", minimum=1)
        if epoch >= _EPOCH_END:
            raise RuntimeError(f"SignalPad.next_epoch: epoch {epoch} does not fit the pad's "
                               f"int64 signals; make a fresh pad (drop_signal_pad)")
        self.order.follow()
        self.epoch = epoch
        return epoch


#: runtime-cache key of the pads :func:`signal_pad` replaced: ``(key, pad)`` in the order of
#: their replacement (the same on every rank), freed by :func:`free_retired_pads`
_RETIRED = "signal_pads:retired"


def signal_pad(key: str, slots: int) -> SignalPad:
    """The process's pad named ``key`` with at least ``slots`` signals, made on first use.

    Collective on first use (it allocates ``slots`` signals); later calls return the cached
    pad. A pad that is too small is replaced (collective again) by one of
    ``max(slots, 2 * its size)`` signals (``slots`` where the heap has no room for more), so
    a pad asked for ever more slots is replaced O(log n) times; the new pad's epochs (host
    and device) start from 0.

    The replaced pad is *retired*, not freed: its holders may still use it (a cached
    workspace keeps its signals, a CUDA graph captured with it replays into it and into its
    device-epoch cell, a peer's kernel of an earlier call may still signal into it). It
    stays allocated, its cell alive, until :func:`free_retired_pads` at a point where none
    is left: ``ditron.ops.collectives.release_workspaces()`` (also run when a workspace
    allocation finds the heap full), after a barrier and after dropping the graphs and
    workspaces that point into it; :func:`drop_signal_pad` frees those of its key. A user's
    own CUDA graph captured with it must not be replayed after that (nor after the
    workspaces it uses are freed).
    """
    slots = check_int(slots, "ditron.signal_pad: slots", minimum=1)
    rt = current()
    old = rt.cache.get(("signal_pad", key))
    if old is not None and old.signals.numel() >= slots:
        return old
    name = f"signals:{key}"
    try:  # on HeapExhausted (raised on every rank alike) the old pad stays
        pad = SignalPad.allocate(max(slots, 2 * old.signals.numel()) if old else slots, name)
    except HeapExhausted:
        if old is None or 2 * old.signals.numel() <= slots:
            raise
        pad = SignalPad.allocate(slots, name)
    if old is not None:
        pad.order.inherit(old.order)  # its uses follow the old pad's last one
        rt.cache.setdefault(_RETIRED, []).append((key, old))
    rt.cache[("signal_pad", key)] = pad
    from .barrier import barrier

    barrier()  # peers must see the zeroed pad before anyone notifies into it
    return pad


def retired_pads() -> int:
    """How many replaced pads this process keeps until :func:`free_retired_pads`."""
    return len(current().cache.get(_RETIRED, ()))


def free_retired_pads() -> int:
    """Free every pad :func:`signal_pad` replaced (in the order of their replacement, the
    same on every rank; no communication) and return how many. Call it on every rank at
    the same point, one where nothing uses them any more: after a barrier (no peer's
    earlier kernel still signals into them) and after dropping every cached workspace and
    CUDA graph that may point into them (``release_workspaces`` does all three)."""
    rt = current()
    retired = rt.cache.pop(_RETIRED, [])
    for _, pad in retired:
        _free(pad)
    return len(retired)


def _free(pad: SignalPad) -> None:
    pad.freed = True
    current().heap.free(pad.signals)


def drop_signal_pad(key: str) -> None:
    """Free the pad named ``key`` and the pads of that name it replaced (collective; nobody
    may still signal into any of them). A later ``signal_pad(key, ...)`` makes a fresh
    zeroed pad, so its users must restart their epochs too."""
    rt = current()
    pad = rt.cache.pop(("signal_pad", key), None)
    retired = rt.cache.get(_RETIRED, [])
    kept = [(k, p) for k, p in retired if k != key]
    if len(kept) < len(retired):
        for k, p in retired:
            if k == key:
                _free(p)
        rt.cache[_RETIRED] = kept
    if pad is not None:
        _free(pad)
