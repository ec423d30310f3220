"""Ordering between the issuing stream and an engine's side stream (CUDA).

An engine's side stream starts after the issuing stream's queue so far, or after a mark
recorded in it earlier (``Engine.mark`` / ``Engine.issue(..., since=)``); ``join`` makes the
issuing stream wait for the side stream. All three are driver calls on raw handles
(``cuEventRecord`` / ``cuStreamWaitEvent``) with events made once per process: torch's
``Stream.wait_stream`` makes a new event per call, and the Python stream and event objects
cost a few microseconds each, which a GEMM-RS call pays a dozen times (``docs/perf.md``,
session 13). They are legal inside a CUDA-graph capture (the wait brings the side stream into
the capture; ``join`` brings it back).

Re-recording an event does not affect waits already queued on it (CUDA semantics), so one
event serves every join; a mark must outlive the issues that start after it, so marks take
turns over a ring of ``MARK_RING`` events: a mark stays valid for the next ``MARK_RING - 1``
marks of the process (an op takes one per call).

An engine holds the local tensors of what it issued on a side stream until its ``join``
(``allocator_tensors``), rather than ``record_stream``: after the join the caching allocator
reuses their memory only for work queued behind the side stream, while ``record_stream``
keeps the memory from reuse until the side stream's event has completed, so that a result
dropped at once (as a benchmark or a training step drops it) is not reused by the next
call, which then allocates anew and can block the host in the allocator (``docs/perf.md``,
session 17).

State an engine keeps on the device across issues (the ``sm`` engine's descriptor tables,
the ``tma`` engine's counter) is a :class:`Kept`: it notes the streams other than its
allocation stream that kernels using it were launched on, and when the engine lets it go
(evicted from a cache, the engine dropped) it first records them on its memory
(``Tensor.record_stream``), so that the memory is reused only once those kernels have passed.
"""

from __future__ import annotations

import contextlib
import dataclasses

import torch

from ..runtime import stream_memops
from ..runtime.world import current

#: marks in flight per process before the oldest one's event is recorded again
MARK_RING = 16


@dataclasses.dataclass
class _Events:
    """One device's events: ``join`` (recorded and waited at once) and the mark ring."""

    join: int
    marks: list[int]
    next_mark: int = 0


_EVENTS: dict[int, _Events] = {}


def _events(device: int) -> _Events:
    events = _EVENTS.get(device)
    if events is None:
        with torch.cuda.device(device):  # events belong to their device's context
            events = _EVENTS[device] = _Events(
                stream_memops.new_event(),
                [stream_memops.new_event() for _ in range(MARK_RING)])
    return events


def _current(device: int) -> int:
    return torch._C._cuda_getCurrentRawStream(device)


def mark_current(device: int | None = None) -> int:
    """A point in the current stream's queue: an event (raw handle) recorded there now."""
    device = torch.cuda.current_device() if device is None else device
    events = _events(device)
    event = events.marks[events.next_mark]
    events.next_mark = (events.next_mark + 1) % MARK_RING
    stream_memops.record_event(event, _current(device))
    return event


def start_after(side: torch.cuda.Stream, since: int | None) -> None:
    """Make ``side`` wait for the mark ``since``, or for everything queued on the current
    stream (of ``side``'s device)."""
    device = side.device.index
    if since is None:
        since = _events(device).join
        stream_memops.record_event(since, _current(device))
    stream_memops.wait_event(side.cuda_stream, since)


def allocator_tensors(transfers) -> list[torch.Tensor]:
    """The local tensors of ``transfers`` that torch's caching allocator owns (not the
    symmetric heap's): what an engine holds until it joins the stream that moves them."""
    heap = current().heap
    return [x for t in transfers if t.src.numel() for x in (t.src, t.dst)
            if not heap.contains(x)]


def join(side: torch.cuda.Stream) -> None:
    """Make the current stream (of ``side``'s device) wait for everything queued on
    ``side`` so far."""
    follow(_current(side.device.index), side)


def follow(waiter: int, side: torch.cuda.Stream) -> None:
    """Make the raw stream ``waiter`` (of ``side``'s device) wait for everything queued on
    ``side`` so far."""
    event = _events(side.device.index).join
    stream_memops.record_event(event, side.cuda_stream)
    stream_memops.wait_event(waiter, event)


class Kept:
    """A device tensor an engine keeps across issues (a descriptor table, a counter) and the
    streams, other than the one it was allocated on, that kernels reading or writing it
    were launched on (:meth:`used_on`). When its last reference goes (evicted from a cache,
    the engine dropped), it first records each of those streams on its memory
    (``Tensor.record_stream``), so that the caching allocator reuses the memory only once
    the work queued there by then, the kernels that use it included, has passed. (Without,
    the block went back at once to the pool of its allocation stream, whose next allocation
    took it while a launch on another stream, e.g. a concurrent engine's side stream, still
    read it or counted in it.) The allocation stream needs no record: the allocator orders
    reuse there itself."""

    __slots__ = ("tensor", "_made_on", "_readers")

    def __init__(self, tensor: torch.Tensor) -> None:
        self.tensor = tensor
        cuda = tensor.device.type == "cuda"
        #: the raw handle of the stream it was allocated on (the current one now)
        self._made_on = _current(tensor.device.index) if cuda else None
        self._readers: dict[int, torch.cuda.Stream] = {}

    def used_on(self, raw: int | None, stream=None) -> None:
        """Note that a kernel using the tensor is launched on the stream of raw handle
        ``raw`` (``None``: the CPU backend, nothing to note): ``stream`` (that stream's
        object; default the current stream, which must be it)."""
        if raw is None or raw == self._made_on or raw in self._readers:
            return
        if stream is None:
            stream = torch.cuda.current_stream(self.tensor.device)
        self._readers[raw] = stream

    def readers(self) -> list:
        """The streams noted by :meth:`used_on` (other than the allocation stream)."""
        return list(self._readers.values())

    def __del__(self) -> None:
        for stream in self._readers.values():
            try:
                self.tensor.record_stream(stream)
            except Exception:  # noqa: BLE001, S110 - interpreter shutdown: CUDA may be gone
                pass


def release_undrained(held: list[torch.Tensor], streams) -> None:
    """Record ``streams`` (side streams with work not yet joined) on each tensor of ``held``
    (``Tensor.record_stream``): for an engine dropped before :meth:`~.base.Engine.drain`,
    whose held tensors would otherwise go back to the allocator under the moves still
    queued there. Errors are ignored (interpreter shutdown: CUDA may be gone)."""
    for x in held:
        for stream in streams:
            try:
                x.record_stream(stream)
            except Exception:  # noqa: BLE001, S110
                pass


def launch_stream(lane: SideLane, device: torch.device) -> int | None:
    """The raw handle of the stream ``lane``'s launches take now (its side stream, or the
    current stream of ``device``); ``None`` on the CPU backend."""
    if device.type != "cuda":
        return None
    return lane.side_raw if lane.side is not None else _current(device.index)


class SideLane:
    """Where an SM-based engine (``sm``, ``tma``) launches: inline on the issuing stream,
    or (``concurrent``, CUDA) on a side stream that first waits for the issuing stream (or
    a mark), so later work of the issuing stream (a GEMM) runs beside the moves on the SMs
    it leaves free; :meth:`drain` makes the issuing stream wait for it."""

    def __init__(self, device: torch.device, concurrent: bool) -> None:
        self.side = torch.cuda.Stream(device) if concurrent and device.type == "cuda" \
            else None
        #: the side stream's raw handle (``None`` without one)
        self.side_raw = self.side.cuda_stream if self.side is not None else None
        self._pending = False
        self._held: list[torch.Tensor] = []

    @contextlib.contextmanager
    def launching(self, transfers, since: object | None = None):
        """Context for the launches of ``transfers``: the side stream (after ``since``)
        holding their allocator tensors until :meth:`drain`, or the current stream."""
        if self.side is None:
            yield
            return
        start_after(self.side, since)
        self._held += allocator_tensors(transfers)
        try:
            with torch.cuda.stream(self.side):
                yield
        finally:  # launches made before one that raised still need joining at drain
            self._pending = True

    def mark(self) -> object | None:
        return mark_current(self.side.device.index) if self.side is not None else None

    def drain(self) -> None:
        if self._pending:
            join(self.side)
            self._pending = False
            self._held = []

    def __del__(self) -> None:
        if getattr(self, "_pending", False) and self._held:  # dropped undrained
            release_undrained(self._held, (self.side,))
