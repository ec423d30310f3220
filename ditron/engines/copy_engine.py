"""Copy engine: host-issued peer copies that use no compute programs.

CUDA: each batch runs on a side stream that first waits for the issuing stream (with
``lanes > 1``, batches take turns over that many side streams, so that one batch's wait
can run while another's copy does); every transfer is a ``copy_`` (or ``add_`` for
``reduce``) between a local tensor and a peer view (``ditron.peer``), preceded by a
stream-ordered wait for ``after`` when given (and, with ``clear_after``, a reset of that
signal to 0) and followed in the side stream's order by
the signal's release store (stream memory operations, or one-program kernels when a wait
timeout is set; see ``sync.py``). When stream memory operations are available and the
batch has only plain copies of contiguous tensors with host-known signal values, every
step is a driver call on the side stream's handle (``cuStreamWaitValue64``,
``cuMemcpyAsync``, ``cuStreamWriteValue64``): no torch dispatch. :meth:`drain` makes the
current stream wait for the side streams used (the host does not block).

CPU: a single worker thread per process performs the copies with ``memcpy`` (after polling
the ``after`` signal, if any) and then stores the signal into the peer's pad (an aligned
8-byte store; the copy's stores come first in program order, and x86 keeps stores in
order). It never launches Triton (the interpreter is not thread-safe); :meth:`drain` joins
every outstanding batch, then raises the first error any of them met (a wait timeout)."""

from __future__ import annotations

import concurrent.futures as cf
import time

import torch

from ..runtime import stream_memops
from ..runtime.integers import check_int
from ..runtime.signals import host_value
from ..runtime.world import current
from .base import (
    Engine,
    Signal,
    Transfer,
    check_added,
    check_transfer,
    endpoints,
    named,
    register_engine,
    signal_slot,
)
from .streams import (
    allocator_tensors,
    follow,
    join,
    mark_current,
    release_undrained,
    start_after,
)
from .sync import notify_one, slot_address, use_stream_memops, wait_one

_EXECUTOR: cf.ThreadPoolExecutor | None = None
_SIDE_STREAMS: dict = {}


def _executor() -> cf.ThreadPoolExecutor:
    global _EXECUTOR
    if _EXECUTOR is None:
        _EXECUTOR = cf.ThreadPoolExecutor(max_workers=1, thread_name_prefix="ditron-copy")
    return _EXECUTOR


#: priority of the side streams (torch's convention: lower is higher; values beyond the
#: device's range take its end). What it changes is the signal and wait kernels of the
#: graph-safe variants: beside a large kernel on another stream (a local copy, a sum) a
#: kernel of default priority starts only once that kernel's last blocks have started,
#: and a chunk's signal then waits for it (2 H200s: up to ~190 us per 1 GB all-gather
#: under graphs, docs/perf.md, session 19). CUDA graphs keep the priority of the stream
#: a kernel was captured on (torch instantiates them with per-node priorities)
PRIORITY = -8


def side_stream(device: torch.device, lane: int | str = 0) -> torch.cuda.Stream:
    """The copy engine's side stream ``lane`` of ``device`` (made once per process)."""
    key = (device, lane, PRIORITY)
    stream = _SIDE_STREAMS.get(key)
    if stream is None:
        stream = _SIDE_STREAMS[key] = torch.cuda.Stream(device=device, priority=PRIORITY)
    return stream


def _endpoints(t: Transfer, rank: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The transfer's tensors as this process can touch them (peer views for remote sides;
    ``ValueError`` where a remote side is not a symmetric tensor)."""
    if t.src.numel() == 0:
        return t.src, t.src  # nothing to move; only the signal matters
    return endpoints(t, rank, "copy_engine")


@register_engine
class CopyEngine(Engine):
    """Peer copies issued from the host (DMA engines on GPU, a worker thread on CPU).

    A reducing transfer sums with torch's ``add_``, in the dtype itself, and takes the
    dtypes of :data:`~.base.ADDED` with ``src`` and ``dst`` on one device (refused before
    anything moves: ``bool``, fp8, ..., a host ``src`` into a GPU's ``dst``). A plain copy
    may move between host memory and the GPU.
    ``lanes``: side streams that successive :meth:`issue` calls take turns on (CUDA). Only
    transfers within one call are ordered among themselves; :meth:`drain` waits for all.
    ``signal_lane`` (CUDA, signals that are kernels: device-counted values or a wait
    timeout): each signal runs on a stream of its own behind its copy, so that the copies
    of a side stream follow each other without a kernel between them; the signals keep
    their order among themselves."""

    name = "copy_engine"
    can_reduce = True
    can_wait = True

    def __init__(self, lanes: int = 1, signal_lane: bool = False) -> None:
        lanes = check_int(lanes, "copy_engine: lanes", 1)
        self._signal_lane = bool(signal_lane)
        self._pending: list[cf.Future] = []
        self._lanes = lanes
        self._turn = 0
        self._streams: list = []
        self._held: list[torch.Tensor] = []

    def issue(self, transfers: list[Transfer], since: object | None = None) -> None:
        rt = current()
        rank = rt.world.rank
        for i, t in enumerate(transfers):
            try:
                check_transfer(t, rank, "copy_engine", can_wait=True)
                if t.reduce:
                    _check_sum(t)
            except ValueError as exc:
                raise named(exc, transfers, i) from None
        if rt.world.backend == "cpu":
            jobs = []
            for i, t in enumerate(transfers):
                try:
                    src, dst = _endpoints(t, rank)
                    sig = signal_slot(t, "copy_engine") if t.signal is not None else None
                except ValueError as exc:
                    raise named(exc, transfers, i) from None
                after = _poll_args(t.after) if t.after is not None else None
                value = host_value(t.signal.value) if t.signal else 0
                jobs.append((src, dst, t.reduce, sig, value, after, t.clear_after))
            self._pending.append(_executor().submit(_run_host, jobs))
            return
        self._issue_cuda(transfers, rank, since)

    def mark(self) -> object | None:
        rt = current()
        return mark_current(rt.world.device.index) if rt.world.backend != "cpu" else None

    def _issue_cuda(self, transfers: list[Transfer], rank: int, since) -> None:
        rt = current()
        # every remote side translated (and so checked) before anything is queued
        raw = use_stream_memops() and all(_raw_ok(t) for t in transfers)
        ends: list = []  # driver copies' spans (raw), else the tensors to move
        for i, t in enumerate(transfers):
            try:
                ends.append(_span(t, rank) if raw else _endpoints(t, rank))
            except ValueError as exc:
                raise named(exc, transfers, i) from None
        side = side_stream(rt.world.device, self._turn % self._lanes)
        self._turn += 1
        start_after(side, since)
        if side not in self._streams:
            self._streams.append(side)
        self._held += allocator_tensors(transfers)
        if raw:
            _issue_raw(transfers, ends, rank, side)
            return
        signals = side_stream(rt.world.device, "signals") if self._signal_lane else side
        if signals is not side:
            if since is not None:  # the copies may start earlier than the issuing stream's
                start_after(signals, None)  # queue, the signals not
            if signals not in self._streams:
                self._streams.append(signals)
        with torch.cuda.stream(side):
            for t, (src, dst) in zip(transfers, ends, strict=True):
                if t.after is not None:
                    wait_one(t.after.pad, t.after.index, t.after.value)
                    if t.clear_after:
                        notify_one(t.after.pad, t.after.index, 0, rank)
                if src.numel():
                    if t.reduce:
                        dst.add_(src)
                    else:
                        dst.copy_(src, non_blocking=True)
                if t.signal is not None:
                    if signals is not side:
                        follow(signals.cuda_stream, side)
                    with torch.cuda.stream(signals):
                        notify_one(t.signal.pad, t.signal.index, t.signal.value, t.dst_rank)

    def drain(self) -> None:
        for side in self._streams:
            join(side)
        self._held = []
        self._streams = []
        self._turn = 0
        pending, self._pending = self._pending, []
        cf.wait(pending)  # every batch, also those after one that failed, before raising
        for fut in pending:
            fut.result()

    def __del__(self) -> None:
        # dropped undrained: the tensors it holds stay from reuse until its side streams
        # have passed the moves queued there (on CPU the worker's jobs hold their own)
        held = getattr(self, "_held", None)  # None: __init__ refused its arguments
        if held:
            release_undrained(held, self._streams)


def _check_sum(t: Transfer) -> None:
    """Raise ``ValueError`` unless the reducing transfer ``t`` can sum with torch's ``add_``
    where it lands: a dtype of :data:`~.base.ADDED`, and ``src`` and ``dst`` (a remote side
    lies on this rank's device, in its heap) on one device when it moves anything. (A
    ``src`` in host memory summed into a GPU's ``dst``, or the reverse, failed in ``add_``
    after the batch's earlier transfers had been issued and their signals raised.)"""
    check_added("copy_engine", t.src.dtype)
    if t.src.device != t.dst.device and t.src.numel():
        raise ValueError(f"copy_engine: a reducing transfer sums src into dst with torch's "
                         f"add_, which needs them on one device; got {t.src.device} and "
                         f"{t.dst.device} (copy src to dst's device first)")


def _raw_ok(t: Transfer) -> bool:
    """Whether ``t`` can be issued as driver calls by address (see the module docstring)."""
    return (not t.reduce and t.src.is_contiguous() and t.dst.is_contiguous()
            and (t.signal is None or isinstance(t.signal.value, int))
            and (t.after is None or isinstance(t.after.value, int)))


def _span(t: Transfer, rank: int) -> tuple[int, int, int] | None:
    """``t``'s destination and source addresses, as this process maps them, and byte count
    for a driver copy (``None``: nothing to copy); ``ValueError`` where a remote side is
    not a live symmetric tensor (:func:`~.base.endpoints`)."""
    if t.src.numel() == 0:
        return None
    src, dst = endpoints(t, rank, "copy_engine")
    return dst.data_ptr(), src.data_ptr(), t.src.numel() * t.src.element_size()


def _issue_raw(transfers: list[Transfer], spans: list, rank: int, side) -> None:
    stream = side.cuda_stream
    for t, span in zip(transfers, spans, strict=True):
        if t.after is not None:
            slot = slot_address(t.after.pad, t.after.index, rank)
            stream_memops.wait_value(stream, slot, t.after.value)
            if t.clear_after:
                stream_memops.write_value(stream, slot, 0)
        if span is not None:
            stream_memops.memcpy(stream, *span)
        if t.signal is not None:
            stream_memops.write_value(
                stream, slot_address(t.signal.pad, t.signal.index, t.dst_rank), t.signal.value)


# Grad and inference modes are per thread: this worker writes tensors that callers made
# under no_grad or inference_mode, which only inference mode lets it update in place.
@torch.inference_mode()
def _run_host(jobs) -> None:
    for src, dst, reduce, sig, value, after, clear in jobs:
        if after is not None:
            _spin(*after)
            if clear:
                after[0].fill_(0)
        if src.numel():
            if reduce:
                dst.add_(src)
            else:
                dst.copy_(src)
        if sig is not None:
            sig.fill_(value)


def _poll_args(after: Signal) -> tuple[torch.Tensor, int, str, float]:
    """What the worker thread needs to poll ``after``: the local slot, the value, the slot's
    name for a timeout error, and the timeout."""
    rt = current()
    slot = after.pad.signals[after.index: after.index + 1]
    name = rt.heap.describe(rt.heap.offset_of(after.pad.signals) + 8 * after.index)
    return slot, host_value(after.value), name, rt.wait_timeout


def _spin(sig: torch.Tensor, value: int, name: str, timeout: float) -> None:
    """Wait (host thread, CPU backend) until the local signal ``sig`` is >= ``value``."""
    from ..runtime.diagnostics import WaitTimeoutError

    deadline = time.monotonic() + timeout if timeout > 0 else None
    delay = 1e-6
    while True:
        seen = int(sig.item())
        if seen >= value:
            return
        if deadline is not None and time.monotonic() > deadline:
            raise WaitTimeoutError(rank=current().world.rank, signal=name, expected=value,
                                   seen=seen, timeout=timeout)
        time.sleep(delay)
        delay = min(delay * 2, 1e-3)
