"""The transfer-engine interface: one logical transfer, several physical implementations.

A :class:`Transfer` says "after this, ``dst`` on rank ``dst_rank`` holds ``src`` of rank
``src_rank`` (or ``dst += src`` when ``reduce``), then ``signal`` is raised on ``dst_rank``";
with ``after``, the move starts only once that signal of the issuing rank has reached its
value (engines with ``can_wait``: how a pull waits for the owner to publish a chunk).
``src`` and ``dst`` are tensors as the *issuing* rank sees them: the local side is an
ordinary tensor, the remote side a view of a symmetric tensor in the issuing rank's own
heap, which the engine translates to the peer (the one translation rule of the heap).
A push is issued by ``src_rank``, a pull by ``dst_rank``.

Engines (each one module): ``copy_engine`` (host-issued peer copies on a side stream, no
SMs; a host thread on CPU), ``sm`` (a Triton load/store kernel on a configurable number of
programs, can sum while it moves), ``tma`` (Hopper), ``network`` (ranks on other nodes).
Plans and operators pick engines by name through :func:`get_engine` and never branch on the
backend.
"""

from __future__ import annotations

import abc
import dataclasses

import torch

from ..runtime.integers import as_int, check_int
from ..runtime.signals import DeviceValue, SignalPad
from ..runtime.world import current


@dataclasses.dataclass(frozen=True)
class Signal:
    """Signal ``index`` of ``pad`` raised to ``value`` (set, release) when a transfer lands;
    ``value`` may be read on the device (a :class:`DeviceValue`, engines with ``can_wait``)."""

    pad: SignalPad
    index: int
    value: int | DeviceValue


@dataclasses.dataclass(frozen=True)
class Transfer:
    src: torch.Tensor
    dst: torch.Tensor
    src_rank: int
    dst_rank: int
    signal: Signal | None = None
    reduce: bool = False
    #: start only once the issuing rank's signal ``after.index`` is >= ``after.value``
    after: Signal | None = None
    #: then set that signal back to 0: a flag with one writer and this one waiter, so its
    #: value can be a constant (what stream waits inside a CUDA graph compare with). The
    #: writer must raise it again only after learning that this transfer has landed
    clear_after: bool = False


def check_transfer(t: Transfer, rank: int, engine: str, *, contiguous: bool = False,
                   can_wait: bool = False, mapped: bool = True,
                   on_device: bool = False) -> None:
    """Raise ``ValueError`` for a transfer ``engine`` cannot move from ``rank``: a rank
    outside the world, neither side ``rank``'s, (``mapped``: engines that reach the peer's
    heap) the other side on another node, a signal or ``after`` pad that was freed
    (``drop_signal_pad``), a slot outside its pad, a signal value neither an int64 nor a
    :class:`DeviceValue`, ``src`` and ``dst`` differing in shape or dtype, (``contiguous``)
    a side not contiguous, a side that is a conjugate or negative view, a ``dst`` whose
    elements share memory, ``src`` and ``dst`` of a rank-local transfer partly overlapping,
    a non-empty side on the meta device (no data), or ``after`` or a device-read signal
    value where the engine cannot wait (``can_wait``), or (``on_device``: engines whose
    kernels take raw addresses) a side not on this rank's device. Engines check every
    transfer of a batch before moving any."""
    rt = current()
    size = rt.world.world_size
    src_rank, dst_rank = t.src_rank, t.dst_rank
    if not (type(src_rank) is int and type(dst_rank) is int  # the common case (hot path)
            and 0 <= src_rank < size and 0 <= dst_rank < size):
        check_int(src_rank, f"{engine}: src_rank", 0, size)
        check_int(dst_rank, f"{engine}: dst_rank", 0, size)
    if rank != src_rank and rank != dst_rank:
        raise ValueError(f"{engine}: rank {rank} issues a transfer from rank {src_rank} to "
                         f"rank {dst_rank}; one side must be local")
    other = dst_rank if src_rank == rank else src_rank
    if mapped and rt.heap.mapping.peers[other] is None:
        raise ValueError(f"{engine}: rank {other} is on another node (its heap is not mapped "
                         f"on rank {rank}); use the network engine")
    if t.signal is not None:
        _check_slot(t, t.signal, "signal", engine)
    if t.after is not None:
        _check_slot(t, t.after, "after", engine)
    if t.src.shape != t.dst.shape or t.src.dtype != t.dst.dtype:
        raise ValueError(f"{engine}: src {tuple(t.src.shape)} {t.src.dtype} and dst "
                         f"{tuple(t.dst.shape)} {t.dst.dtype} differ")
    if on_device and not (t.src.device == t.dst.device == rt.world.device):
        raise ValueError(f"{engine}: src and dst must be on this rank's device "
                         f"{rt.world.device}, got {t.src.device} and {t.dst.device} (its "
                         f"kernel reads raw addresses); use copy_engine for other memory")
    if contiguous and not (t.src.is_contiguous() and t.dst.is_contiguous()):
        raise ValueError(f"{engine}: src and dst must be contiguous")
    _check_memory(t, engine, None if mapped else rank)
    if t.clear_after and t.after is None:
        raise ValueError(f"{engine}: clear_after needs a signal to wait for (after=)")
    if t.after is not None and not can_wait:
        raise ValueError(f"{engine}: cannot wait for a signal before a transfer (after=); "
                         f"use an engine with can_wait, e.g. copy_engine")
    if t.signal is not None and isinstance(t.signal.value, DeviceValue) and not can_wait:
        raise ValueError(f"{engine}: signal values read on the device (DeviceValue) need an "
                         f"engine with can_wait, e.g. copy_engine")


#: the dtypes that engines summing with torch's ``add_`` (``copy_engine``, ``network``) take:
#: those torch adds on the CPU and on CUDA. Refused: ``bool`` (its add is a logical or), the
#: fp8 types and ``uint16`` / ``uint32`` / ``uint64`` (torch has no add for them: it failed
#: only once the data had moved), ``complex32`` (experimental in torch), and the bit, sub-byte
#: and quantized types
ADDED = (torch.float64, torch.float32, torch.float16, torch.bfloat16, torch.complex128,
         torch.complex64, torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8)


def check_added(engine: str, dtype: torch.dtype) -> None:
    """Raise ``ValueError`` (naming ``engine``) unless a reducing transfer of ``dtype`` can
    sum with torch's ``add_`` (:data:`ADDED`)."""
    if dtype not in ADDED:
        raise ValueError(f"{engine}: cannot sum dtype {dtype} into the destination; "
                         f"reducing transfers take {', '.join(str(d) for d in ADDED)}")


def endpoints(t: Transfer, rank: int, engine: str) -> tuple[torch.Tensor, torch.Tensor]:
    """``t``'s ``(src, dst)`` as ``rank`` reaches them: its local side itself, the remote
    side a view of that side's copy in the peer's heap (``ditron.peer``). ``ValueError``
    naming ``engine`` where the remote side is not a live symmetric tensor (not in the
    heap, freed, or reaching past its buffer); call it for every transfer of a batch
    before moving any."""
    heap = current().heap
    try:
        src = t.src if t.src_rank == rank else heap.peer(t.src, t.src_rank)
        dst = t.dst if t.dst_rank == rank else heap.peer(t.dst, t.dst_rank)
    except ValueError as exc:
        raise ValueError(f"{engine}: the remote side of a transfer from rank {t.src_rank} "
                         f"to rank {t.dst_rank} must be a symmetric tensor: {exc}") from None
    return src, dst


def named(exc: ValueError, transfers: list[Transfer], index: int) -> ValueError:
    """``exc``, a refusal of ``transfers[index]``, naming that transfer: its place in the
    batch and its ranks (engines raise it ``from None`` in place of ``exc``)."""
    t = transfers[index]
    return ValueError(f"{exc} (transfer {index} of a batch of {len(transfers)}: rank "
                      f"{t.src_rank!r} to rank {t.dst_rank!r})")


def signal_slot(t: Transfer, engine: str) -> torch.Tensor:
    """The slot ``t`` raises, as a view of ``dst_rank``'s pad seen from this process;
    ``ValueError`` naming ``engine`` where the pad is not a live symmetric buffer of the
    current world's heap (a dropped pad: the kernels' notify wrote into the freed block,
    whatever buffer held it next). Call it for every signalled transfer of a batch before
    moving any."""
    sig = t.signal
    try:
        return current().heap.peer(sig.pad.signals, t.dst_rank)[sig.index: sig.index + 1]
    except ValueError as exc:
        raise ValueError(f"{engine}: the signal pad of a transfer from rank {t.src_rank} to "
                         f"rank {t.dst_rank} must be a live symmetric buffer: {exc}") from None


def _check_memory(t: Transfer, engine: str, rank: int | None) -> None:
    """Raise ``ValueError`` for sides whose memory cannot be moved as it lies (with
    ``rank``, two-sided engines: only the side that ``rank`` moves; the other is a
    stand-in): a conjugate or negative view (the kernels and driver copies move the bits,
    dropping the view's conjugation or negation, and a peer view of one is a plain tensor),
    a ``dst`` whose elements share memory (a stride of 0, as from ``expand``: torch refused
    it only at the copy, after the batch was issued, leaving its signal unraised), and
    ``src`` and ``dst`` of a rank-local transfer that overlap other than as the same tensor
    (the programs of a kernel, or torch's copy, read what another one already wrote), and
    a non-empty side on the meta device (no memory: the copy engine's worker failed on it
    only after the batch's earlier transfers had moved and raised their signals)."""
    src, dst = t.src, t.dst
    if rank is None:  # both sides (one chain of calls: a loop took 0.3 us more)
        other_bits = src.is_conj() or src.is_neg() or dst.is_conj() or dst.is_neg()
        no_data = src.is_meta or dst.is_meta
    else:
        mine = src if rank == t.src_rank else dst
        other_bits = mine.is_conj() or mine.is_neg()
        no_data = mine.is_meta
    if no_data and src.numel():
        raise ValueError(f"{engine}: src and dst must hold data; got tensors on {src.device} "
                         f"and {dst.device} (a meta tensor has no memory to move)")
    if other_bits:
        raise ValueError(f"{engine}: src and dst must not be conjugate or negative views "
                         f"(an engine moves their memory as it lies); resolve them first "
                         f"(resolve_conj() / resolve_neg()) and copy a received plain "
                         f"tensor into such a view")
    stride = dst.stride()
    if (rank is None or rank == t.dst_rank) and 0 in stride and any(
            st == 0 and n > 1 for st, n in zip(stride, dst.shape, strict=True)):
        raise ValueError(f"{engine}: dst has elements that share memory (strides {stride} for "
                         f"shape {tuple(dst.shape)}, e.g. from expand); pass a tensor whose "
                         f"elements are distinct")
    if t.src_rank == t.dst_rank and src.numel() and _overlap(src, dst):
        raise ValueError(f"{engine}: src and dst of a transfer within rank {t.src_rank} "
                         f"overlap in memory; pass a dst of its own (or clone src)")


def _span(x: torch.Tensor) -> tuple[int, int]:
    """The bytes ``[lo, hi)`` that the elements of a non-empty ``x`` lie in (strides are
    never negative in torch)."""
    lo = x.data_ptr()
    extent = sum(st * (n - 1) for st, n in zip(x.stride(), x.shape, strict=True))
    return lo, lo + (extent + 1) * x.element_size()


def _overlap(src: torch.Tensor, dst: torch.Tensor) -> bool:
    """Whether ``src`` and ``dst`` (non-empty) overlap other than as the same elements in the
    same order. Where one side's elements do not fill its span (strided), interleaved
    elements cannot be told from shared ones by spans: such pairs pass, as in torch."""
    if src.device != dst.device:
        return False
    (a, b), (c, d) = _span(src), _span(dst)
    if b <= c or d <= a:
        return False
    if a == c and src.stride() == dst.stride():
        return False  # the same tensor: a copy changes nothing, a sum doubles it
    size = src.element_size()
    return b - a == src.numel() * size and d - c == dst.numel() * size


def _check_slot(t: Transfer, signal: Signal, what: str, engine: str) -> None:
    if signal.pad.freed:
        raise ValueError(f"{engine}: the {what} pad of a transfer from rank {t.src_rank} to "
                         f"rank {t.dst_rank} must be a live symmetric buffer: it was freed "
                         f"(drop_signal_pad or free_retired_pads); get the pad again")
    slots = signal.pad.signals.shape[0]
    index = signal.index
    if not (type(index) is int or as_int(index) is not None) or not 0 <= index < slots:
        raise ValueError(f"{engine}: {what} slot {index!r} is outside its pad's {slots} slots")
    value = signal.value
    if isinstance(value, DeviceValue):
        return
    if not (type(value) is int or as_int(value) is not None) or not -1 << 63 <= value < 1 << 63:
        raise ValueError(f"{engine}: {what} value {value!r} is not an int64 (or a "
                         f"DeviceValue)")


class Engine(abc.ABC):
    """Moves batches of transfers issued by this rank.

    The copy engine and ``tma`` move a batch's transfers in order; ``sm`` moves those of
    one launch at once and refuses a batch in which they would race. One engine may be
    issued to from several CUDA streams of a rank: a batch starts after its issuing
    stream's queue (or mark), and where batches share device state (the ``sm`` and ``tma``
    engines' counters, when they launch on the issuing stream) an issue on another stream
    than the previous one first waits for it (``runtime/stream_order.py``)."""

    name: str
    #: whether the engine can sum into the destination (``Transfer.reduce``; the ``sm``
    #: engine sums ``runtime/dtypes.py``'s ``SUMMED`` types, those that sum with torch's
    #: ``add_`` the types of :data:`ADDED`)
    can_reduce: bool = False
    #: whether the engine honours ``Transfer.after``
    can_wait: bool = False

    @abc.abstractmethod
    def issue(self, transfers: list[Transfer], since: object | None = None) -> None:
        """Start the transfers (asynchronously where the engine can), after the work queued
        on the current stream so far or, with ``since`` (a :meth:`mark`), after only the
        work queued before that mark (engines that move on the current stream or on the
        host start after everything queued; later is always correct)."""

    def mark(self) -> object | None:
        """A point in the current stream's queue for :meth:`issue`'s ``since``: lets a batch
        issued later, e.g. pulls waiting for signals, run beside work queued in between.
        Use it within the call that took it (on CUDA a mark is one of a ring of events,
        ``engines/streams.py``: valid for the next ``MARK_RING - 1`` marks)."""
        return None

    def drain(self) -> None:  # noqa: B027 - engines that finish in issue() need nothing
        """Order what follows after every transfer issued since the previous drain has
        landed and raised its signal: on CUDA the current stream waits for the engine's
        streams (the host does not block; only that stream: drain on the stream that reads
        the results, since a second drain orders nothing more), on the CPU backend the
        host waits. An engine holds the transfers' local tensors until then, so the caller
        may drop them once they are issued; an engine dropped undrained lets them go only
        once its side streams have passed the moves (``streams.release_undrained``), but
        orders nothing: its signals are the only word that the transfers landed."""


_ENGINES: dict[str, type[Engine]] = {}


def register_engine(cls: type[Engine]) -> type[Engine]:
    _ENGINES[cls.name] = cls
    return cls


def get_engine(name: str, **options) -> Engine:
    """An engine by name (``copy_engine``, ``sm``, ``tma``, ``network``, ...)."""
    if name not in _ENGINES:
        import importlib

        try:
            importlib.import_module(f".{name}", __package__)
        except ModuleNotFoundError:
            pass
    if name not in _ENGINES:
        raise ValueError(f"unknown transfer engine {name!r}; known: {sorted(_ENGINES)}")
    return _ENGINES[name](**options)
