"""The eager chunked exchanges of one node as driver calls (CUDA with stream memory
operations).

``push_gather``, ``pull_gather`` and ``push_reduce_scatter`` (``chunked_exchanges.py``)
run the exchange's protocol (the module docstring of ``exchange.py``: host-counted
epochs, a double-buffered inbox, ``ready`` counting chunks as ``e * CHUNK_SLOTS + i + 1``,
``ack`` after the last read). Eagerly, on CUDA without a wait timeout, every step of that
protocol is a driver call by address:
``cuStreamWaitValue64`` / ``cuStreamWriteValue64`` for the signals, ``cuMemcpyAsync`` for
the pushes, pulls and local copies, event records and waits between the streams. The
generic path builds the same steps from ``Transfer`` objects, tensor views and the copy
engine's checks, ~140-270 us of host time per call on 2 H200s, more than the device needs
below ~256 MB (``docs/perf.md``, session 19); :class:`RawExchange` issues the same calls
from addresses computed once per inbox (:class:`_Site`) and integer arithmetic.

Same pads, inboxes and epochs as the generic path (``signal_pad(key, 2 W)`` and
``exchange._inbox(key, ...)``), so a process may switch between the two from call to call.
"""

from __future__ import annotations

import dataclasses

import torch

from ..engines import copy_engine
from ..engines.streams import join, start_after
from ..engines.sync import use_stream_memops
from ..runtime import stream_memops
from ..runtime.config import env_flag
from ..runtime.signals import SignalPad, signal_pad
from ..runtime.world import current
from .exchange import CHUNK_SLOTS, inbox_and_pad
from .workspaces import allocate

#: take the raw path where it can run (env ``DITRON_RAW_PUSHES=0``: always the generic one)
ENABLED = env_flag("DITRON_RAW_PUSHES", True)


@dataclasses.dataclass
class _Site:
    """What stays fixed between the eager calls of one exchange on one inbox: the
    addresses of both halves of every node peer's inbox and of the signal slots, the side
    stream, and views of the halves made once (:meth:`RawExchange.slot_rows`). Rebuilt when
    the inbox or the pad is replaced (regrown, or released with the workspaces)."""

    raw: torch.Tensor  # my inbox, [2, cap] uint8
    pad: SignalPad
    node: range
    me: int
    halves: tuple[int, int]  # addresses of my halves
    peer_halves: tuple[dict[int, int], dict[int, int]]  # parity -> q -> q's half
    ready_at: dict[int, int]  # q -> address of ready[me] in q's pad
    ack_at: dict[int, int]  # q -> address of ack[me] in q's pad
    ready_from: dict[int, int]  # q -> address of my ready[q]
    ack_mine: tuple[int, ...]  # addresses of my ack[q], q a node peer
    side: torch.cuda.Stream
    views: dict = dataclasses.field(default_factory=dict)


@dataclasses.dataclass
class RawExchange:
    """One eager call of a chunked exchange on one node (see the module docstring).
    Pushes: :meth:`push` queues chunk ``i``'s pushes on the copy engine's side stream
    (raising ``ready[me]`` to ``base + i + 1`` on each receiver); :meth:`wait` makes the
    current stream wait until chunk ``i`` of every node peer is in my inbox. Pulls:
    :meth:`publish` copies chunk ``i`` into my inbox and raises ``ready[me]`` on every
    peer; :meth:`pull` copies chunk ``i`` out of a peer's inbox on the side stream once it
    is published. :meth:`copy` is a stream-ordered local copy by address; :meth:`finish`
    acknowledges on every node peer and makes the current stream wait for the side
    stream."""

    site: _Site
    epoch: int
    base: int  # e * CHUNK_SLOTS
    parity: int  # the inbox half of this call
    stream: int  # the current stream's handle

    @property
    def me(self) -> int:
        return self.site.me

    @property
    def inbox(self) -> int:
        """Address of this call's half of my inbox."""
        return self.site.halves[self.parity]

    @property
    def half(self) -> torch.Tensor:
        """This call's half of my inbox as a uint8 tensor."""
        return self.site.raw[self.parity]

    @property
    def peer_inbox(self) -> dict[int, int]:
        """Node peer ``q`` -> address of this call's half of ``q``'s inbox."""
        return self.site.peer_halves[self.parity]

    def slot_rows(self, dtype: torch.dtype, c: int) -> list[torch.Tensor]:
        """This call's half as ``W`` rows of ``c`` elements of ``dtype`` (slot ``q`` holds
        what rank ``q`` sent), made once per half, dtype and ``c``."""
        key = (self.parity, dtype, c)
        rows = self.site.views.get(key)
        if rows is None:
            if len(self.site.views) >= 64:
                self.site.views.clear()
            w = current().world.world_size
            slots = self.half[: w * c * dtype.itemsize].view(dtype).view(w, c)
            rows = self.site.views[key] = list(slots.unbind(0))
        return rows

    def push(self, i: int, parts: list[tuple[int, int, int, int]]) -> None:
        """Chunk ``i``: ``parts`` of ``(q, src_address, inbox_byte_offset, nbytes)``, each
        copied into ``q``'s inbox at that offset, then ``ready[me]`` raised on ``q``."""
        side = self.site.side.cuda_stream
        value = self.base + i + 1
        peer_inbox, ready_at = self.peer_inbox, self.site.ready_at
        for q, src, offset, nbytes in parts:
            if nbytes:
                stream_memops.memcpy(side, peer_inbox[q] + offset, src, nbytes)
            stream_memops.write_value(side, ready_at[q], value)

    def wait(self, i: int) -> None:
        value = self.base + i + 1
        for addr in self.site.ready_from.values():
            stream_memops.wait_value(self.stream, addr, value)

    def copy(self, dst: int, src: int, nbytes: int) -> None:
        if nbytes:
            stream_memops.memcpy(self.stream, dst, src, nbytes)

    def publish(self, i: int, src: int, offset: int, nbytes: int) -> None:
        """Chunk ``i`` of a pulled exchange: copy ``nbytes`` from ``src`` into my inbox
        half at ``offset`` (current stream), then raise ``ready[me]`` to ``base + i + 1``
        on every node peer."""
        self.copy(self.inbox + offset, src, nbytes)
        value = self.base + i + 1
        for addr in self.site.ready_at.values():
            stream_memops.write_value(self.stream, addr, value)

    def pull(self, i: int, parts: list[tuple[int, int, int, int]]) -> None:
        """Chunk ``i`` of a pulled exchange, on the side stream: for each ``(q,
        dst_address, inbox_byte_offset, nbytes)``, wait until ``ready[q]`` reaches ``base +
        i + 1``, then copy ``nbytes`` from ``q``'s inbox half at that offset to ``dst``."""
        side = self.site.side.cuda_stream
        value = self.base + i + 1
        peer_inbox, ready_from = self.peer_inbox, self.site.ready_from
        for q, dst, offset, nbytes in parts:
            stream_memops.wait_value(side, ready_from[q], value)
            if nbytes:
                stream_memops.memcpy(side, dst, peer_inbox[q] + offset, nbytes)

    def finish(self, reads_on_side: bool = False) -> None:
        """Acknowledge on every node peer (``ack[me] = epoch``: I am done reading this
        call's halves, my own that they pushed into, or theirs that I pulled from) and make
        the current stream wait for the side stream. ``reads_on_side``: the reads were the
        side stream's pulls of the peers' halves, so the acknowledgements follow them
        there; else they follow the current stream's reads of my own half."""
        side = self.site.side
        stream = side.cuda_stream if reads_on_side else self.stream
        for addr in self.site.ack_at.values():
            stream_memops.write_value(stream, addr, self.epoch)
        join(side)


def current_stream(device: int) -> int:
    """The raw handle of this thread's current stream on ``device``."""
    return torch._C._cuda_getCurrentRawStream(device)


def usable(engine: str, graph: bool) -> bool:
    """Whether this call can take the raw path: ``ENABLED``, eager, the copy engine, CUDA,
    stream memory operations available and no wait timeout."""
    return ENABLED and not graph and engine == "copy_engine" and use_stream_memops()


def _site(key: str, raw: torch.Tensor, pad: SignalPad) -> _Site:
    """The cached :class:`_Site` of exchange ``key`` on inbox ``raw`` and pad ``pad``."""
    rt = current()
    site = rt.cache.get(("raw_pushes", key))
    if site is not None and site.raw is raw and site.pad is pad:
        return site
    w, me = rt.world.world_size, rt.world.rank
    node = rt.topo.node_ranks()
    heap = rt.heap
    offset, stride = heap.offset_of(raw), raw.stride(0)
    bases = heap.mapping.bases
    peers = [q for q in node if q != me]
    mine = pad.address(me)
    site = _Site(
        raw=raw, pad=pad, node=node, me=me,
        halves=(bases[me] + offset, bases[me] + offset + stride),
        peer_halves=tuple({q: bases[q] + offset + p * stride for q in peers}
                          for p in (0, 1)),
        ready_at={q: pad.address(q) + 8 * me for q in peers},
        ack_at={q: pad.address(q) + 8 * (w + me) for q in peers},
        ready_from={q: mine + 8 * q for q in peers},
        ack_mine=tuple(mine + 8 * (w + q) for q in peers),
        side=copy_engine.side_stream(rt.world.device))
    rt.cache[("raw_pushes", key)] = site
    return site


def open_raw(key: str, inbox_nbytes: int) -> RawExchange:
    """Open one call of exchange ``key`` whose inbox holds ``inbox_nbytes`` per half: next
    epoch, the current stream waits for the acknowledgement of the call two epochs back on
    every node peer (the half this call writes is free), the side stream starts after the
    current stream's queue."""
    rt = current()
    raw, pad = inbox_and_pad(key, inbox_nbytes, 2 * rt.world.world_size)
    site = _site(key, raw, pad)
    epoch = pad.next_epoch()
    stream = current_stream(rt.world.device.index)
    if epoch > 2:
        for addr in site.ack_mine:
            stream_memops.wait_value(stream, addr, epoch - 2)
    start_after(site.side, None)
    return RawExchange(site, epoch, epoch * CHUNK_SLOTS, epoch % 2, stream)



def push_gather_direct(key: str, flat: torch.Tensor, out: torch.Tensor) -> None:
    """Eager all-gather on one node straight into a symmetric ``out`` (``[W, n]``,
    contiguous, at the same heap offset on every rank): my ``flat`` (``[n]``) goes into row
    ``me`` of every node peer's ``out`` by the copy engine; no inbox, no copy out.

    Pad ``key`` (``2 W`` slots): ``free[q]`` (slot ``W + q``) is set to the call's epoch
    ``e`` by rank ``q`` on my pad in ``q``'s stream order as its call starts (``q``'s
    ``out`` is no longer read by earlier work); ``ready[q]`` (slot ``q``) to ``e`` once
    ``q``'s row is in my ``out``. The push to ``q`` waits on the side stream for
    ``free[q] >= e``; the current stream waits for every ``ready[q] >= e`` and for the side
    stream."""
    rt = current()
    w, me = rt.world.world_size, rt.world.rank
    node = rt.topo.node_ranks()
    # a new pad that finds the heap full frees the cached workspaces (``out`` is the
    # caller's); the epoch only once nothing can fail
    pad = allocate(lambda: signal_pad(key, 2 * w))
    epoch = pad.next_epoch()
    heap = rt.heap
    offset = heap.offset_of(out)
    stream = current_stream(rt.world.device.index)
    peers = [q for q in node if q != me]
    mine = pad.address(me)
    for q in peers:
        stream_memops.write_value(stream, pad.address(q) + 8 * (w + me), epoch)
    side = copy_engine.side_stream(rt.world.device)
    start_after(side, None)
    nbytes = flat.numel() * flat.element_size()
    src, row = flat.data_ptr(), offset + me * nbytes
    for q in peers:
        stream_memops.wait_value(side.cuda_stream, mine + 8 * (w + q), epoch)
        if nbytes:
            stream_memops.memcpy(side.cuda_stream, heap.mapping.bases[q] + row, src, nbytes)
        stream_memops.write_value(side.cuda_stream, pad.address(q) + 8 * me, epoch)
    if nbytes:
        stream_memops.memcpy(stream, out.data_ptr() + me * nbytes, src, nbytes)
    for q in peers:
        stream_memops.wait_value(stream, mine + 8 * q, epoch)
    join(side)


__all__ = ["RawExchange", "current_stream", "open_raw", "push_gather_direct", "usable"]
