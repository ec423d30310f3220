"""The eager chunked pushes of one node as driver calls (CUDA with stream memory operations).

:func:`~ditron.ops.exchange.push_gather` and
:func:`~ditron.ops.exchange.push_reduce_scatter` run the exchange's protocol (the module
docstring of ``exchange.py``: host-counted epochs, a double-buffered inbox, ``ready``
counting chunks as ``e * CHUNK_SLOTS + i + 1``, ``ack`` after the last read). Eagerly, on
CUDA without a wait timeout, every step of that protocol is a driver call by address:
``cuStreamWaitValue64`` / ``cuStreamWriteValue64`` for the signals, ``cuMemcpyAsync`` for
the pushes and the local copies, event records and waits between the streams. The
generic path builds the same steps from ``Transfer`` objects, tensor views and the copy
engine's checks, ~140-270 us of host time per call on 2 H200s, more than the device needs
below ~256 MB (``docs/perf.md``, session 19); :class:`RawPushes` computes the addresses
with integer arithmetic from the tensors' base addresses and issues the same calls.

Same pads, inboxes and epochs as the generic path (``signal_pad(key, 2 W)`` and
``exchange._inbox(key, ...)``), so a process may switch between the two from call to call.
"""

from __future__ import annotations

import dataclasses
import os

import torch

from ..engines import copy_engine
from ..engines.streams import join, start_after
from ..runtime import stream_memops
from ..runtime.signals import signal_pad
from ..runtime.world import current

#: take the raw path where it can run (env ``DITRON_RAW_PUSHES=0``: always the generic one)
ENABLED = os.environ.get("DITRON_RAW_PUSHES", "1") != "0"


@dataclasses.dataclass
class RawPushes:
    """One eager call of a chunked push exchange ``key`` on one node (see the module
    docstring). :meth:`push` queues chunk ``i``'s pushes on the copy engine's side stream
    (raising ``ready[me]`` to ``base + i + 1`` on each receiver); :meth:`wait` makes the
    current stream wait until chunk ``i`` of every node peer is in my inbox; :meth:`copy`
    is a stream-ordered local copy by address; :meth:`finish` acknowledges on every node
    peer and makes the current stream wait for the side stream."""

    inbox: int  # address of this call's half of my inbox
    half: torch.Tensor  # the same half as a uint8 tensor
    node: range
    me: int
    base: int  # e * CHUNK_SLOTS
    epoch: int
    stream: int  # the current stream's handle
    side: torch.cuda.Stream
    peer_inbox: dict[int, int]  # q -> address of this call's half of q's inbox
    ready_at: dict[int, int]  # q -> address of ready[me] in q's pad
    ack_at: dict[int, int]  # q -> address of ack[me] in q's pad
    ready_mine: dict[int, int]  # q -> address of my ready[q]

    def push(self, i: int, parts: list[tuple[int, int, int, int]]) -> None:
        """Chunk ``i``: ``parts`` of ``(q, src_address, inbox_byte_offset, nbytes)``, each
        copied into ``q``'s inbox at that offset, then ``ready[me]`` raised on ``q``."""
        side = self.side.cuda_stream
        value = self.base + i + 1
        for q, src, offset, nbytes in parts:
            if nbytes:
                stream_memops.memcpy(side, self.peer_inbox[q] + offset, src, nbytes)
            stream_memops.write_value(side, self.ready_at[q], value)

    def wait(self, i: int) -> None:
        value = self.base + i + 1
        for addr in self.ready_mine.values():
            stream_memops.wait_value(self.stream, addr, value)

    def copy(self, dst: int, src: int, nbytes: int) -> None:
        if nbytes:
            stream_memops.memcpy(self.stream, dst, src, nbytes)

    def finish(self) -> None:
        for addr in self.ack_at.values():
            stream_memops.write_value(self.stream, addr, self.epoch)
        join(self.side)


def current_stream(device: int) -> int:
    """The raw handle of this thread's current stream on ``device``."""
    return torch._C._cuda_getCurrentRawStream(device)


def usable(engine: str, graph: bool) -> bool:
    """Whether this call can take the raw path: ``ENABLED``, eager, the copy engine, CUDA,
    stream memory operations available and no wait timeout."""
    from ..engines.sync import use_stream_memops

    return ENABLED and not graph and engine == "copy_engine" and use_stream_memops()


def open_raw(key: str, inbox_nbytes: int) -> RawPushes:
    """Open one call of exchange ``key`` whose inbox holds ``inbox_nbytes`` per half: next
    epoch, the current stream waits for the acknowledgement of the call two epochs back on
    every node peer (the half this call writes is free), the side stream starts after the
    current stream's queue."""
    from .exchange import CHUNK_SLOTS, _inbox

    rt = current()
    w, me = rt.world.world_size, rt.world.rank
    node = rt.topo.node_ranks()
    pad = signal_pad(key, 2 * w)
    epoch = pad.next_epoch()
    raw = _inbox(key, inbox_nbytes)
    parity = epoch % 2
    heap = rt.heap
    offset = heap.offset_of(raw) + parity * raw.stride(0)
    stream = current_stream(rt.world.device.index)
    peers = [q for q in node if q != me]
    mine = pad.address(me)
    if epoch > 2:
        for q in peers:
            stream_memops.wait_value(stream, mine + 8 * (w + q), epoch - 2)
    side = copy_engine.side_stream(rt.world.device)
    start_after(side, None)
    bases = heap.mapping.bases
    return RawPushes(
        inbox=bases[me] + offset, half=raw[parity], node=node, me=me,
        base=epoch * CHUNK_SLOTS, epoch=epoch, stream=stream, side=side,
        peer_inbox={q: bases[q] + offset for q in peers},
        ready_at={q: pad.address(q) + 8 * me for q in peers},
        ack_at={q: pad.address(q) + 8 * (w + me) for q in peers},
        ready_mine={q: mine + 8 * q for q in peers})


__all__ = ["RawPushes", "current_stream", "open_raw", "usable"]
