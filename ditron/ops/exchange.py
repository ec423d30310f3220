"""The inbox exchange every collective is built on.

Each op (``key``) owns a symmetric *inbox* with two halves (epoch parity) and a signal pad
with ``2 * W`` slots: ``ready[q]`` (rank ``q`` has written its part of this call into my
inbox) and ``ack[q]`` (rank ``q`` has finished reading the inbox half I wrote into at this
parity). One call, with ``e = pad.next_epoch()`` and half ``e % 2``:

1. wait ``ack[q] >= e - 2`` for every node peer I push to (the half I am about to overwrite
   was consumed by its owner two calls ago; with two halves this rarely blocks);
2. push my parts into the peers' inboxes with a transfer engine, each raising ``ready[me]``
   to ``e`` on its receiver; peers on other nodes (or every peer with ``engine="network"``)
   exchange through the network engine straight into the local inbox instead;
3. wait ``ready[q] >= e`` for every node peer; the caller reads the half;
4. :meth:`Call.finish` raises ``ack[me]`` to ``e`` on every node peer.

No barrier per call; values only grow (the foundation's epoch protocol). Every rank takes
part in every call (zero-sized parts still signal), so the epochs of all ranks agree.
:func:`open_exchange` exposes the steps so that parts can be pushed one at a time;
:func:`pull_gather` is the same protocol with pulls (each rank publishes, peers read),
:func:`push_gather` an all-gather by pushes and :func:`push_reduce_scatter` a
reduce-scatter on it; they move large parts in chunks, with
``ready`` counting chunks (``e * 64 + i + 1`` once chunk ``i`` of call ``e`` is there), so
that the transfer of one chunk overlaps the publishing or summing of another.
:class:`Chunked` holds one call's chunk signals for them (and the copy-engine GEMM-RS),
with the epoch counted on the host or, for CUDA graphs, on the device (:func:`graph_pad`).
Eagerly on CUDA the pushed all-gather and reduce-scatter issue the same steps as driver
calls by address (``raw_pushes.py``).
"""

from __future__ import annotations

import dataclasses
import functools
import os

import torch

from ..engines.base import Engine, Signal, Transfer, get_engine
from ..engines.copy_engine import side_stream
from ..engines.streams import follow, join, mark_current, start_after
from ..engines.sync import (
    bump,
    bump_and_notify,
    copy_value,
    notify_one,
    notify_peers,
    slot_address,
    use_stream_memops,
    wait_slots,
)
from ..runtime import stream_memops
from ..runtime.heap import ALIGNMENT
from ..runtime.signals import DeviceValue, SignalPad, signal_pad
from ..runtime.world import current
from .graphs import capture_id, capturing, not_warmed, require_warm
from .raw_pushes import open_raw, usable
from .workspaces import alloc_buffers, cached, drop


def _inbox_cap(nbytes: int) -> int:
    """Bytes per half of an inbox that holds ``nbytes``: aligned, a power of two."""
    half = max(ALIGNMENT, -(-nbytes // ALIGNMENT) * ALIGNMENT)
    return 1 << (half - 1).bit_length()


def _inbox(key: str, nbytes: int) -> torch.Tensor:
    """The op's symmetric inbox ``[2, >= nbytes]`` (uint8), grown in powers of two."""
    rt = current()
    cap = _inbox_cap(nbytes)
    ws = rt.cache.get(("workspace", "inbox", key))
    if ws is not None and ws.tensors[0].shape[1] < cap:
        drop(("inbox", key))
        ws = None
    if ws is None:
        ws = cached(("inbox", key),
                    lambda: alloc_buffers([((2, cap), torch.uint8, f"inbox:{key}")]))
        from ..runtime.barrier import barrier

        barrier()  # every rank has initialised its inbox before a peer writes into it
    return ws.tensors[0]


def engine_instance(name: str, **options) -> Engine:
    """This process's cached instance of engine ``name`` made with ``options`` (engines keep
    descriptor caches)."""
    engines = current().cache.setdefault("collectives:engines", {})
    key = (name, *sorted(options.items())) if options else name
    if key not in engines:
        engines[key] = get_engine(name, **options)
    return engines[key]


@dataclasses.dataclass
class Part:
    """``data`` (contiguous) goes to ``peer``'s inbox at element ``offset``."""

    peer: int
    data: torch.Tensor
    offset: int


def refuse_capture(what: str) -> None:
    """Raise if a CUDA graph is being captured: the exchange keeps its epochs on the host,
    so a replayed graph would wait for stale signals and read stale inboxes."""
    if capturing():
        raise RuntimeError(f"ditron: {what} keeps per-call state on the host and cannot be "
                           f"captured in a CUDA graph (graph-safe: all_reduce(..., "
                           f"engine='sm'))")


@dataclasses.dataclass
class Call:
    """One exchange in flight (see :func:`open_exchange`): ``inbox`` (flat, the call's half)
    is valid from :meth:`wait` until :meth:`finish`."""

    pad: SignalPad
    epoch: int
    inbox: torch.Tensor
    node: range
    engine: str
    recvs: dict[int, tuple[int, int]]
    engines: list[Engine] = dataclasses.field(default_factory=list)
    net_transfers: list[Transfer] = dataclasses.field(default_factory=list)
    #: whether :meth:`finish` acknowledges (``False``: acknowledgements implied by data,
    #: :func:`open_exchange`'s ``implied``)
    acks: bool = True

    def _remote(self, q: int) -> bool:
        return self.engine == "network" or not current().topo.same_node(q)

    def push(self, parts: list[Part]) -> None:
        """Start moving ``parts`` (node peers: now, with the call's engine, each raising
        ``ready[me]`` on its receiver in the engine's order after the data; own part: a local
        copy; peers on other nodes: collected for :meth:`wait`). The engine's stream starts
        after the work already queued on the current stream, so a part may be a tensor the
        current stream is still computing."""
        me = current().world.rank
        local = []
        for part in parts:
            region = self.inbox[part.offset: part.offset + part.data.numel()]
            if part.peer == me:
                region.copy_(part.data.reshape(-1))
            elif self._remote(part.peer):
                self.net_transfers.append(Transfer(part.data.reshape(-1), region, me,
                                                   part.peer))
            else:
                local.append(Transfer(part.data.reshape(-1), region, me, part.peer,
                                      Signal(self.pad, me, self.epoch)))
        if local:
            eng = engine_instance(self.engine)
            eng.issue(local)
            if eng not in self.engines:
                self.engines.append(eng)

    def wait(self) -> None:
        """Exchange with peers on other nodes, then wait (stream-ordered) until every node
        peer's part has landed in my inbox."""
        me = current().world.rank
        for q, (offset, numel) in self.recvs.items():
            if q != me and self._remote(q):
                region = self.inbox[offset: offset + numel]
                self.net_transfers.append(Transfer(region, region, q, me))
        if self.net_transfers:
            net = engine_instance("network")
            net.issue(self.net_transfers)
            net.drain()
            self.net_transfers = []
        wait_slots(self.pad, 0, self.node, self.epoch, skip=me)

    def finish(self) -> None:
        rt = current()
        me = rt.world.rank
        if self.acks:
            notify_peers(self.pad, rt.world.world_size + me, self.epoch, self.node, skip=me)
        for engine in self.engines:
            engine.drain()
        if rt.wait_timeout > 0 or rt.world.backend == "cpu":
            from ..runtime.diagnostics import check_waits

            check_waits()


def open_exchange(key: str, dtype: torch.dtype, inbox_numel: int,
                  recvs: dict[int, tuple[int, int]], engine: str,
                  implied: bool = False) -> Call:
    """Start an exchange whose parts are pushed later, one :meth:`Call.push` at a time (to
    overlap them with the computation of the next part); then :meth:`Call.wait`, read
    ``call.inbox``, :meth:`Call.finish`. Waits (stream-ordered) until the inbox half this call
    writes on each node peer is free.

    ``recvs[q] = (offset, numel)``: where rank ``q``'s part lands in my inbox (needed for
    peers reached through the network engine). ``engine`` names the engine for node peers;
    ``"network"`` sends every part through it.

    ``implied`` (with ``ACK_BY_DATA``; every call on ``key`` must pass the same): the
    caller's protocol implies the acknowledgement, so no rank waits for it or sends it.
    That holds where, in every call, each rank waits (stream-ordered, before the call
    returns) for data from every node peer that the peer wrote or announced only after the
    reads of its previous call were done, in its stream order: then my call ``e - 1``
    waited for what each peer sent after it had read its share of call ``e - 2``, the half
    call ``e`` writes. It takes the calls on ``key`` to follow each other in one stream
    order per rank, so a call on another stream than the previous one first waits for
    that one (CUDA).
    """
    refuse_capture(key)
    rt = current()
    w, me = rt.world.world_size, rt.world.rank
    pad = signal_pad(key, 2 * w)
    epoch = pad.next_epoch()
    itemsize = dtype.itemsize
    raw = _inbox(key, inbox_numel * itemsize)
    inbox = raw[epoch % 2, : inbox_numel * itemsize].view(dtype)
    shm = range(0, 0) if engine == "network" else rt.topo.node_ranks()
    acks = not (implied and ACK_BY_DATA)
    if not acks and rt.world.backend == "cuda":
        _follow_last_call(key)
    if epoch > 2 and acks:
        wait_slots(pad, w, shm, epoch - 2, skip=me)
    return Call(pad, epoch, inbox, shm, engine, recvs, acks=acks)


def _follow_last_call(key: str) -> None:
    """Order this call of the exchange ``key`` after its previous one on this rank: the
    current stream waits for the previous call's stream if that was another."""
    rt = current()
    device = rt.world.device.index
    stream = torch._C._cuda_getCurrentRawStream(device)
    last = rt.cache.get(("exchange_stream", key))  # a Stream: kept alive for the wait
    if last is None or last.cuda_stream != stream:
        if last is not None:
            follow(stream, last)
        rt.cache[("exchange_stream", key)] = torch.cuda.current_stream(device)


def exchange(key: str, dtype: torch.dtype, inbox_numel: int, parts: list[Part],
             recvs: dict[int, tuple[int, int]], engine: str) -> Call:
    """Move ``parts`` into the peers' inboxes and wait for mine to fill (all parts at once:
    :func:`open_exchange`, :meth:`Call.push`, :meth:`Call.wait`)."""
    call = open_exchange(key, dtype, inbox_numel, recvs, engine)
    call.push(parts)
    call.wait()
    return call


#: chunked exchanges cut a part into chunks of about this many bytes (at most
#: ``PULL_MAX_CHUNKS``; env ``DITRON_PULL_CHUNK_BYTES``), so that the transfer of one chunk
#: overlaps the publishing or summing of another
PULL_CHUNK_BYTES = 64 << 20
PULL_MAX_CHUNKS = 8
#: a reduce-scatter's last chunks shrink geometrically by this factor (env
#: ``DITRON_CHUNK_TAPER``; 1 or 0: chunks of one size), down to a ``TAPER_DIVISOR``-th of
#: the chunk size, for parts of at least ``TAPER_MIN_BYTES``
TAPER_GROWTH = 3
TAPER_DIVISOR = 16
TAPER_MIN_BYTES = 64 << 20
#: the same threshold for the graph-safe pushes, whose extra chunks cost no host time (2
#: H200s under graphs: the reduce-scatter 1.12-1.17x faster at 64 and 96 MB with 16 MB than
#: with 64 MB, the all-gather 1.05-1.08x; docs/perf.md, session 19)
TAPER_GRAPH_MIN_BYTES = 16 << 20
#: side streams the copy engine's all-gather pulls take turns on, chunk by chunk: one
#: chunk's wait runs while another's copy does
PULL_LANES = 3
#: the all-gather's *first* chunks taper (small ones first, so that less of the own part is
#: published before the peers can pull it) for parts of at least ``PULL_TAPER_MIN_BYTES``,
#: when graph-safe (replayed: no host cost per chunk) or, eagerly, from
#: ``PULL_TAPER_EAGER_BYTES``, where the extra chunks' host time stays under the transfer
#: (2 H200s, graphs: 1-3% faster at 32 MB-256 MB parts, 7% at 512 MB; eagerly 2% faster
#: at 256 and 512 MB parts, 25-55% slower at 32-128 MB; docs/perf.md, session 17).
#: ``True`` / ``False`` forces it
PULL_TAPER: bool | None = None
PULL_TAPER_MIN_BYTES = 32 << 20
PULL_TAPER_EAGER_BYTES = 256 << 20
#: side streams the copy engine's graph-safe pushes (:func:`push_gather`,
#: :func:`push_reduce_scatter`) take turns on, chunk by chunk (env ``DITRON_PUSH_LANES``).
#: One: with the signals on a lane of their own (``PUSH_SIGNAL_LANE``) the copies already
#: follow each other, and two were as fast or slower (2 H200s under graphs, docs/perf.md,
#: session 19). Eagerly the pushes keep one stream: there every chunk to ``q`` raises the
#: same slot to a growing value, and only one stream keeps those writes in order
PUSH_LANES = int(os.environ.get("DITRON_PUSH_LANES") or 1)
#: graph-safe pushes raise their chunk signals from a stream of their own
#: (``CopyEngine(signal_lane=True)``), so that the copies of a side stream follow each
#: other without a signal kernel between them (env ``DITRON_PUSH_SIGNAL_LANE``: 0 turns
#: it off; 2 H200s under graphs, one lane: the reduce-scatter 1.03-1.10x faster than two
#: lanes without it at 256 MB-1 GB, the all-gather by pushes 1.01-1.04x, docs/perf.md,
#: session 19). Eagerly the signals are stream memory operations and stay in line
PUSH_SIGNAL_LANE = os.environ.get("DITRON_PUSH_SIGNAL_LANE", "1") not in ("", "0")
#: how the copy engine's all-gather on one node moves: ``"pull"`` (:func:`pull_gather`:
#: each rank publishes its part into its inbox, its peers copy it out), ``"push"``
#: (:func:`push_gather`: each rank copies its part into its peers' inboxes, they copy it
#: out), or ``None``: pushes (2 H200s: 1.01-1.12x faster than pulls eagerly from 96 MB to
#: 1 GB, session 18; under graphs, with the signals at high priority on their own lane,
#: 1.07-1.10x faster from 256 MB, session 19; docs/perf.md); env ``DITRON_GATHER_BY``
GATHER_BY: str | None = os.environ.get("DITRON_GATHER_BY") or None
#: ready values of call ``e`` are ``e * CHUNK_SLOTS + i + 1`` for chunk ``i``
CHUNK_SLOTS = 64
#: halves of the graph-safe variants' inbox (:func:`graph_pad`; every inbox has two): 2
#: (calls take turns; captured calls then need no acknowledgement wait, ``ACK_BY_DATA``)
#: or 1 (every call waits for the acknowledgement of the one before). Each setting has its
#: own pad and inboxes (read at call time, so both may be used in turn); env
#: ``DITRON_GRAPH_HALVES`` sets it at import
GRAPH_HALVES = int(os.environ.get("DITRON_GRAPH_HALVES") or 2)
#: with two halves, a captured call whose inbox's previous call was captured in the same
#: graph writes without waiting for the readers' acknowledgement: that call received every
#: peer's data, which each peer sent after finishing its own earlier calls, the reads of
#: this half included (:func:`graph_pad`). Eagerly, exchanges opened with ``implied``
#: (the copy-engine GEMM-RS) neither wait for acknowledgements nor send them, by the same
#: argument (:func:`open_exchange`). Off: every call waits (as with one half)
ACK_BY_DATA = os.environ.get("DITRON_ACK_BY_DATA", "1") not in ("", "0")
#: a graph-safe push whose first copy waits for no acknowledgement starts after the work
#: queued before the call, not behind its epoch bump (the chunk signals, which carry the
#: epoch, still follow the bump): one kernel less before the first copy
EARLY_PUSHES = True
#: a graph-safe signal lane's publishes and acknowledgements are copy-engine writes of the
#: epoch cell (no kernel, no SM; :func:`graph_pad`), else one-thread kernels on the lane
LANE_COPIES = os.environ.get("DITRON_LANE_COPIES", "1") not in ("", "0")
#: a graph-safe exchange opened with ``flags`` (the pulled GEMM-RS) signals its chunks by
#: flags that their one reader clears (``Transfer.clear_after``), one set per half of each
#: inbox, instead of the epoch: a flag's value is a constant, so the reader's engine waits
#: with stream memory operations inside a CUDA graph too (no spinning kernel needing an SM
#: beside the GEMM). A writer raises a flag only after writing the inbox half it
#: announces, and may write that half again only once the reader is done reading it, so
#: after the reader cleared the flag (:func:`graph_pad`). Unlike an epoch, a flag can go
#: stale: a call that raises after its peers may have raised its flags but before its
#: pulls were issued leaves them raised (:meth:`Chunked.abandon`); later calls on that
#: inbox then raise instead of reading early. Env ``DITRON_PULL_FLAGS``; off by default,
#: not yet measured on two GPUs (``docs/perf.md``, session 25)
PULL_FLAGS = os.environ.get("DITRON_PULL_FLAGS", "0") not in ("", "0")
#: eager exchanges opened with ``lane`` (the pulled GEMM-RS) raise their chunks' ready
#: values from the signal lane too (a stream write there after an event of the current
#: stream), not between the current stream's GEMM pieces, where each cost 10-12 us on 2
#: H200s (``docs/perf.md``, session 24). Env ``DITRON_EAGER_SIGNAL_LANE``
EAGER_SIGNAL_LANE = os.environ.get("DITRON_EAGER_SIGNAL_LANE", "1") not in ("", "0")


@dataclasses.dataclass
class Chunked:
    """The signals of one call of a chunked exchange on one node (:func:`pull_gather`,
    :func:`push_reduce_scatter`, the copy-engine GEMM-RS): ``inbox`` is this call's;
    :meth:`ready` is the signal that chunk ``i`` of rank ``q``'s part is there, raised on
    its reader; :meth:`wait` waits (stream-ordered) for chunk ``i`` from every node peer;
    :meth:`after` is what a write into ``q``'s inbox waits for on the engine's stream, and
    :meth:`free` what a write into my own inbox waits for (``None`` / nothing with host
    epochs: the call waited when it opened); :meth:`publish` raises my chunk's ``ready``
    on its reader and :meth:`mark` is where work reading this call's epoch may start;
    :meth:`finish` drains the engines and, with host epochs, acknowledges that this rank
    is done reading (drain a pulling engine before it), unless that is implied
    (:func:`open_exchange`). With device epochs and a ``lane`` (CUDA), the bump, the
    acknowledgement and the publishes run on that side stream, and :meth:`free` and
    :meth:`finish` join it; with host epochs only the publishes do (nothing joins it: they
    follow the current stream's work, and the peers wait for them).

    Two epoch sources, one protocol: host-counted (:func:`open_exchange`: a double-buffered
    inbox, ready values ``e * CHUNK_SLOTS + i + 1`` in slot ``q``) and device-counted
    (``graph``, :func:`graph_pad`, what a CUDA graph replays: one inbox or two halves
    taking turns, ready of chunk ``i`` from ``q`` in slot ``i * W + q`` set to ``E``, each
    call acknowledging the ones before it as it starts, writes held until the readers'
    acknowledgement of ``E - 1`` unless it is implied)."""

    inbox: torch.Tensor
    node: range
    pad: SignalPad
    graph: bool
    #: host epochs: ``e * CHUNK_SLOTS`` (ready values count up from it); device: ``E``
    base: int | DeviceValue
    ack: int = 0  # device epochs: the first acknowledgement slot
    call: Call | None = None  # host epochs
    #: device epochs with flags (:func:`graph_pad`): the pad of this call's inbox's flags
    #: and the first slot of its half; ``ready`` is then a flag its reader clears
    flags: tuple[SignalPad, int] | None = None
    #: device epochs: the readers' acknowledgement is implied (:func:`graph_pad`), writes
    #: into their inboxes need not wait
    implied: bool = False
    #: CUDA: the side stream this call's signals (device epochs, :func:`graph_pad`) or
    #: publishes (host epochs, ``EAGER_SIGNAL_LANE``) run on
    lane: torch.cuda.Stream | None = None

    def ready(self, i: int, q: int) -> Signal:
        if self.flags is not None:
            pad, first = self.flags
            return Signal(pad, first + i * current().world.world_size + q, 1)
        if self.graph:
            return Signal(self.pad, i * current().world.world_size + q, self.base)
        return Signal(self.pad, q, self.base + i + 1)

    def abandon(self) -> None:
        """This call failed before all its pulls were issued: with flags, some may stay
        raised, so later calls on this inbox refuse to run (:func:`graph_pad`)."""
        if self.flags is not None:
            current().cache[("stale_flags", self.flags[0].signals.data_ptr())] = True

    def wait(self, i: int) -> None:
        if self.flags is not None:
            raise RuntimeError("Chunked.wait: flags are waited for by the pulls that clear "
                               "them (Transfer.clear_after)")
        sig = self.ready(i, 0)
        me = current().world.rank
        # the ready slots of chunk i are consecutive in q, from slot ``sig.index``
        wait_slots(self.pad, sig.index, self.node, sig.value, skip=me)

    def after(self, q: int) -> Signal | None:
        return Signal(self.pad, self.ack + q, self.base - 1) if self.waits else None

    def publish(self, i: int, q: int) -> None:
        """Raise :meth:`ready` of my chunk ``i`` on ``q`` once the current stream's work so
        far is done (on the lane when there is one: the current stream goes on)."""
        sig = self.ready(i, current().world.rank)
        if self.lane is None:
            notify_one(sig.pad, sig.index, sig.value, q)
            return
        start_after(self.lane, None)
        if not self.graph:  # a host value: one stream write on the lane
            stream_memops.write_value(self.lane.cuda_stream,
                                      slot_address(sig.pad, sig.index, q), sig.value)
            return
        with torch.cuda.stream(self.lane):
            if _lane_copies() and not isinstance(sig.value, int):
                copy_value(sig.pad, sig.index, sig.value, q)
            else:
                notify_one(sig.pad, sig.index, sig.value, q)

    def mark(self, engine: Engine) -> object | None:
        """What ``engine``'s work that reads this call's epoch starts after (``since=``):
        this call's signals so far (on its lane with device epochs, else the current
        stream)."""
        if self.lane is None or not self.graph:
            return engine.mark()
        with torch.cuda.stream(self.lane):
            return mark_current(self.lane.device.index)

    @property
    def waits(self) -> bool:
        """Whether writes into the readers' inboxes wait for their acknowledgement."""
        return self.graph and not self.implied

    def free(self) -> None:
        if self.waits:
            me = current().world.rank
            if self.lane is not None:  # the epoch is bumped there
                join(self.lane)
            wait_slots(self.pad, self.ack, self.node, self.base - 1, skip=me)

    def finish(self, engines: list[Engine]) -> None:
        """Drain ``engines`` (the current stream waits for their streams); host epochs:
        acknowledge on every node peer (:meth:`Call.finish`). Device epochs acknowledge
        when the next call starts (:func:`graph_pad`)."""
        if not self.graph:
            self.call.engines += [e for e in engines if e not in self.call.engines]
            self.call.finish()
            return
        for engine in engines:
            engine.drain()
        if self.lane is not None:
            join(self.lane)
        _check_waits()


def open_chunked(key: str, dtype: torch.dtype, numel: int, engine: str,
                 graph: bool, turn: Turn | None = None, lane: bool = False,
                 flags: bool = False, implied: bool = False) -> Chunked:
    """Open one call of the chunked exchange ``key`` with an inbox of ``numel`` elements:
    host epochs (:func:`open_exchange`, with ``implied``; ``lane``: the publishes on a side
    stream with ``EAGER_SIGNAL_LANE``, stream memory operations) or, with ``graph``, device
    epochs (:func:`graph_pad`, with ``turn``; ``lane``: its signals on a side stream, CUDA;
    ``flags``: chunk flags its readers clear, ``PULL_FLAGS``)."""
    if graph:
        g = graph_pad(key, dtype, numel, turn, lane, flags)
        return Chunked(g.inbox, current().topo.node_ranks(), g.pad, True, g.epoch, g.ack,
                       implied=g.implied, lane=g.lane, flags=g.flags)
    call = open_exchange(key, dtype, numel, {}, engine, implied)
    side = _signal_lane() if lane and EAGER_SIGNAL_LANE and use_stream_memops() else None
    return Chunked(call.inbox, call.node, call.pad, False, call.epoch * CHUNK_SLOTS,
                   call=call, lane=side)


def chunk_bounds(n: int, itemsize: int, taper: bool = False, head: bool = False,
                 min_bytes: int | None = None) -> tuple[tuple[int, int], ...]:
    """Cut a part of ``n`` elements of ``itemsize`` bytes into chunks ``((lo, hi), ...)``:
    about ``PULL_CHUNK_BYTES`` each (at least one chunk, at most ``PULL_MAX_CHUNKS``).

    ``taper`` (parts of at least ``min_bytes``, default ``TAPER_MIN_BYTES``): the last
    chunks are smaller, ``..., g**2, g, 1`` times a ``TAPER_DIVISOR``-th of the chunk size
    (``g = TAPER_GROWTH``), as many as stay below the chunk size and within half the part;
    the body's chunks grow to keep them within ``PULL_MAX_CHUNKS``. For a reduce-scatter,
    whose last chunk is summed after everything has landed: the sum of each chunk hides
    under the transfer of its smaller successor while a transfer is at most ``g`` times
    slower per byte than a sum, and only the smallest one's sum is exposed. (Each chunk
    costs a few microseconds of signals, and on a busy host as much again in host time:
    ``docs/perf.md``, session 16.) ``head``: the same sizes in reverse order, the small
    chunks first (for an all-gather by pulls, whose first chunk is published before
    anything moves)."""
    big = max(1, (int(os.environ.get("DITRON_PULL_CHUNK_BYTES") or 0) or PULL_CHUNK_BYTES)
              // itemsize)
    raw = os.environ.get("DITRON_CHUNK_TAPER")
    try:
        growth = int(raw) if raw else TAPER_GROWTH
    except ValueError:
        raise ValueError(f"DITRON_CHUNK_TAPER must be an integer growth factor (0 or 1: chunks "
                         f"of one size), got {raw!r}") from None
    min_bytes = TAPER_MIN_BYTES if min_bytes is None else min_bytes
    if not taper or n * itemsize < min(min_bytes, big * itemsize):
        growth = 0
    return _bounds(n, big, growth, head, TAPER_DIVISOR, PULL_MAX_CHUNKS)


@functools.lru_cache(maxsize=1024)
def _bounds(n: int, big: int, growth: int, head: bool, divisor: int,
            most: int) -> tuple[tuple[int, int], ...]:
    """:func:`chunk_bounds`' arithmetic (cached: the same shapes recur call after call)."""
    tail: list[int] = []
    size = max(1, big // divisor)
    while growth > 1 and size < big and 2 * (sum(tail) + size) <= n and len(tail) < most - 1:
        tail.append(size)
        size *= growth
    body = n - sum(tail)
    count = max(1, min(body // big, most - len(tail)))
    sizes = [body * (i + 1) // count - body * i // count for i in range(count)] + tail[::-1]
    if head:
        sizes.reverse()
    bounds, lo = [], 0
    for size in sizes:
        bounds.append((lo, lo + size))
        lo += size
    return tuple(bounds)


def pull_gather(key: str, flat: torch.Tensor, out: torch.Tensor, engine: str,
                graph: bool = False) -> None:
    """All-gather on one node by pulls: ``out[q]`` (``out``: ``[W, n]``) receives rank
    ``q``'s ``flat`` (``[n]``, contiguous), copied straight from ``q``'s inbox by ``engine``
    issued on this rank (no copy out of an inbox afterwards).

    The exchange's protocol with the roles of the halves swapped, per chunk
    (:func:`chunk_bounds`, small ones first where ``PULL_TAPER`` says): the pulls are
    issued first (where their waits are stream memory operations; else after the
    publishes), chunk ``i`` of peer ``q`` waiting (stream-ordered, on one of the engine's
    ``PULL_LANES`` streams) for ``ready[q] >= e * 64 + i + 1``; after the ``ack`` wait of
    :func:`open_exchange`, I publish my chunks into my own half one by one, raising
    ``ready[me]`` on the peers after each, and copy my own row; once the pulls have landed,
    ``ack`` (:meth:`Call.finish`) tells the peers I am done with their half. So a peer
    pulls chunk ``i`` while I still publish chunk ``i + 1``.

    ``graph``: the graph-safe variant (:func:`graph_pad`: one inbox, device epochs).
    """
    rt = current()
    me = rt.world.rank
    if rt.topo.num_nodes != 1:
        raise ValueError(f"{key}: pull_gather needs every rank on one node")
    lanes = PULL_LANES if engine == "copy_engine" else 1
    eng = engine_instance(engine, lanes=lanes) if lanes > 1 else engine_instance(engine)
    if not eng.can_wait:
        raise ValueError(f"{key}: pull_gather needs an engine that can wait (copy_engine), "
                         f"got {engine!r}")
    n = flat.numel()
    nbytes = n * flat.element_size()
    taper = PULL_TAPER if PULL_TAPER is not None else graph or nbytes >= PULL_TAPER_EAGER_BYTES
    bounds = chunk_bounds(n, flat.element_size(), taper, head=True,
                          min_bytes=PULL_TAPER_MIN_BYTES)
    if usable(engine, graph) and out.is_contiguous():
        _pull_gather_raw(key, flat, out, bounds)
        return
    x = open_chunked(key, flat.dtype, n, engine, graph)
    mine = x.inbox[:n]
    # chunk by chunk, taking turns over the engine's lanes
    pulls = [Transfer(mine[lo:hi], out[q, lo:hi], q, me, after=x.ready(i, q))
             for i, (lo, hi) in enumerate(bounds) for q in x.node if q != me]
    lane_batches = [batch for k in range(lanes) if (batch := pulls[k::lanes])]
    # Where the pulls' waits are kernels that spin on the engine's stream (device epochs;
    # host epochs without stream memory operations, e.g. with DITRON_WAIT_TIMEOUT), every
    # chunk is published before a pull is issued: a host that blocks later (a module load
    # can synchronise the context) must already have queued what its peers wait for
    # (docs/developing.md, "host order"). The pulls then start from a mark taken before
    # the publishes, not behind them, so either way a peer pulls chunk i while I still
    # publish chunk i + 1. With stream memory operations the pulls are simply issued first.
    publish_first = graph or not use_stream_memops()
    if not publish_first:
        for batch in lane_batches:
            eng.issue(batch)
    x.free()  # every peer pulled my last call (graph-safe)
    start = eng.mark() if publish_first else None
    for i, (lo, hi) in enumerate(bounds):
        mine[lo:hi].copy_(flat[lo:hi])
        published = x.ready(i, me)
        notify_peers(x.pad, published.index, published.value, x.node, skip=me)
    if publish_first:
        for batch in lane_batches:
            eng.issue(batch, since=start)
    out[me].copy_(flat)
    eng.drain()  # the pulls have landed before the ack
    x.finish([])


def _pull_gather_raw(key: str, flat: torch.Tensor, out: torch.Tensor,
                     bounds: tuple[tuple[int, int], ...]) -> None:
    """:func:`pull_gather`'s eager steps as driver calls (``raw_pushes.py``): chunk by
    chunk, publish into my half (raising ``ready[me]`` on the peers), then queue that
    chunk's pulls from every peer's half on the side stream; my own row is a local copy;
    the acknowledgements follow the pulls."""
    n, size = flat.numel(), flat.element_size()
    x = open_raw(key, n * size)
    src, dst = flat.data_ptr(), out.data_ptr()
    for i, (lo, hi) in enumerate(bounds):
        x.publish(i, src + lo * size, lo * size, (hi - lo) * size)
        x.pull(i, [(q, dst + (q * n + lo) * size, lo * size, (hi - lo) * size)
                   for q in x.peer_inbox])
    x.copy(dst + x.me * n * size, src, n * size)
    x.finish(reads_on_side=True)


def gather_on_node(key: str, flat: torch.Tensor, out: torch.Tensor, engine: str,
                   graph: bool = False) -> None:
    """All-gather on one node into ``out`` (``[W, n]``) as ``GATHER_BY`` says (op keys
    ``key + ".pull"`` / ``".push"``)."""
    by = GATHER_BY if GATHER_BY is not None else "push"
    if by == "push":
        push_gather(key + ".push", flat, out, engine, graph)
    elif by == "pull":
        pull_gather(key + ".pull", flat, out, engine, graph)
    else:
        raise ValueError(f"exchange.GATHER_BY must be 'pull', 'push' or None, got {by!r}")


def push_gather(key: str, flat: torch.Tensor, out: torch.Tensor, engine: str,
                graph: bool = False, turn: Turn | None = None) -> None:
    """All-gather on one node by pushes: ``out[q]`` (``out``: ``[W, n]``) receives rank
    ``q``'s ``flat`` (``[n]``, contiguous).

    The exchange's protocol per chunk (:func:`chunk_bounds`, tapered at the end, as the
    reduce-scatter's): chunk ``i`` goes from ``flat`` straight into every node peer's inbox
    (slot ``me``) on ``engine``'s stream, raising ``ready[me]`` on the peer; once chunk
    ``i`` of every peer is there I copy it out into ``out``, so the copy of one chunk
    overlaps the transfer of the next, and only the last (smallest) one's is exposed.
    :meth:`Chunked.finish` acks after the last copy.

    ``graph``: the graph-safe variant (:func:`graph_pad`; the pushes take turns over
    ``PUSH_LANES`` streams, the first push to ``q`` on each waiting for ``q``'s ack of the
    previous call; ``turn``: :func:`graph_pad`'s)."""
    rt = current()
    w, me = rt.world.world_size, rt.world.rank
    n = flat.numel()
    bounds = chunk_bounds(n, flat.element_size(), taper=True, min_bytes=_taper_min(graph))
    if usable(engine, graph) and out.is_contiguous():
        _push_gather_raw(key, flat, out, bounds)
        return
    start = _early_mark(engine, graph)
    x = open_chunked(key, flat.dtype, w * n, engine, graph, turn)
    slots = x.inbox.view(w, n)
    eng = _push_chunks(x, engine, [[Transfer(flat[lo:hi], slots[me, lo:hi], me, q,
                                             x.ready(i, me)) for q in x.node if q != me]
                                   for i, (lo, hi) in enumerate(bounds)], start)
    out[me].copy_(flat)
    peers = [(q.start, q.stop) for q in _spans(x.node, me)]
    for i, (lo, hi) in enumerate(bounds):
        x.wait(i)
        for a, b in peers:
            out[a:b, lo:hi].copy_(slots[a:b, lo:hi])
    x.finish([eng])


def _push_gather_raw(key: str, flat: torch.Tensor, out: torch.Tensor,
                     bounds: tuple[tuple[int, int], ...]) -> None:
    """:func:`push_gather`'s eager steps as driver calls (``raw_pushes.py``)."""
    w = current().world.world_size
    n, size = flat.numel(), flat.element_size()
    x = open_raw(key, w * n * size)
    src, dst = flat.data_ptr(), out.data_ptr()
    for i, (lo, hi) in enumerate(bounds):
        x.push(i, [(q, src + lo * size, (x.me * n + lo) * size, (hi - lo) * size)
                   for q in x.peer_inbox])
    x.copy(dst + x.me * n * size, src, n * size)
    for i, (lo, hi) in enumerate(bounds):
        x.wait(i)
        for q in x.peer_inbox:
            at = (q * n + lo) * size
            x.copy(dst + at, x.inbox + at, (hi - lo) * size)
    x.finish()


def _early_mark(engine: str, graph: bool) -> object | None:
    """Where a graph-safe copy-engine push may start (``EARLY_PUSHES``): a mark of the
    current stream before the call's epoch bump (``None``: CPU, or not such a push)."""
    if not (graph and EARLY_PUSHES and engine == "copy_engine"
            and current().world.backend != "cpu"):
        return None
    return engine_instance(engine).mark()


def _push_chunks(x: Chunked, engine: str, chunks: list[list[Transfer]],
                 start: object | None = None) -> Engine:
    """Issue ``chunks`` (each a list of transfers into peers' inboxes) in order on
    ``engine``, taking turns over ``PUSH_LANES`` streams (the copy engine, graph-safe; one
    stream otherwise); returns the engine to drain. Each stream orders its later pushes to
    ``q`` behind its first, so only the first chunk on each waits for ``q``'s
    acknowledgement (graph-safe; one spinning kernel per peer and stream). ``start``
    (:func:`_early_mark`): the pushes start after it when they wait for no acknowledgement
    and their signals run on a lane of their own (which follows the epoch bump)."""
    ce_graph = engine == "copy_engine" and x.graph
    lanes = PUSH_LANES if ce_graph else 1
    options = {"lanes": lanes} if lanes > 1 else {}
    if ce_graph and PUSH_SIGNAL_LANE:
        options["signal_lane"] = True
    eng = engine_instance(engine, **options)
    since = start if ce_graph and PUSH_SIGNAL_LANE and not x.waits else None
    chunks = [[dataclasses.replace(t, after=x.after(t.dst_rank)) for t in batch]
              for batch in chunks[:lanes]] + chunks[lanes:]
    if lanes == 1:
        eng.issue([t for batch in chunks for t in batch], since=since)
    else:
        for batch in chunks:
            eng.issue(batch, since=since)
    return eng


def _taper_min(graph: bool) -> int:
    return TAPER_GRAPH_MIN_BYTES if graph else TAPER_MIN_BYTES


def _spans(node: range, me: int) -> list[range]:
    """The ranks of ``node`` other than ``me`` as at most two contiguous ranges."""
    return [r for r in (range(node.start, me), range(me + 1, node.stop)) if len(r)]


def push_reduce_scatter(key: str, parts: torch.Tensor, engine: str,
                        graph: bool = False, turn: Turn | None = None,
                        out: torch.Tensor | None = None) -> torch.Tensor:
    """Reduce-scatter on one node by pushes: returns the sum over ranks of their row ``me``
    of ``parts`` (``[W, c]``, contiguous), accumulated in fp32, in ``parts``' dtype (into
    ``out``, ``[c]``, when given).

    The exchange's protocol per chunk (:func:`chunk_bounds` of a row, tapered):
    after the ``ack`` wait of :func:`open_exchange`, chunk ``i`` of row ``q`` goes from
    ``parts`` straight into ``q``'s inbox (slot ``me``) with ``engine``, raising ``ready[me]``
    on ``q`` to ``e * 64 + i + 1``; I sum chunk ``i`` once every node peer's ``ready`` has
    reached that value, so sums of early chunks overlap the transfer of later ones;
    :meth:`Call.finish` acks after the last read.

    ``graph``: the graph-safe variant (:func:`graph_pad`: one inbox, device epochs; the
    pushes take turns over ``PUSH_LANES`` streams, the first push to ``q`` on each waiting
    for ``q``'s ack of the previous call; ``turn``: :func:`graph_pad`'s).
    """
    rt = current()
    w, me = rt.world.world_size, rt.world.rank
    c = parts.shape[1]
    bounds = chunk_bounds(c, parts.element_size(), taper=True, min_bytes=_taper_min(graph))
    if usable(engine, graph) and parts.is_contiguous():
        return _push_reduce_scatter_raw(key, parts, bounds, out)
    start = _early_mark(engine, graph)
    x = open_chunked(key, parts.dtype, w * c, engine, graph, turn)
    slots = x.inbox.view(w, c)
    eng = _push_chunks(x, engine, [[Transfer(parts[q, lo:hi], slots[me, lo:hi], me, q,
                                             x.ready(i, me)) for q in x.node if q != me]
                                   for i, (lo, hi) in enumerate(bounds)], start)
    if out is None:
        out = torch.empty(c, dtype=parts.dtype, device=parts.device)
    for i, (lo, hi) in enumerate(bounds):
        x.wait(i)
        sum_slots(_own_row(slots, parts, me, lo, hi), out[lo:hi])
    x.finish([eng])
    return out


def _push_reduce_scatter_raw(key: str, parts: torch.Tensor,
                             bounds: tuple[tuple[int, int], ...],
                             out: torch.Tensor | None = None) -> torch.Tensor:
    """:func:`push_reduce_scatter`'s eager steps, the movement as driver calls
    (``raw_pushes.py``), the sums as there."""
    w, c = parts.shape
    size = parts.element_size()
    x = open_raw(key, w * c * size)
    src = parts.data_ptr()
    for i, (lo, hi) in enumerate(bounds):
        x.push(i, [(q, src + (q * c + lo) * size, (x.me * c + lo) * size, (hi - lo) * size)
                   for q in x.peer_inbox])
    rows = x.slot_rows(parts.dtype, c)  # views made once per inbox half
    rows = [parts[q] if q == x.me else row for q, row in enumerate(rows)]
    if out is None:
        out = torch.empty(c, dtype=parts.dtype, device=parts.device)
    for i, (lo, hi) in enumerate(bounds):
        x.wait(i)
        if len(bounds) == 1:  # the whole rows: no views to cut
            sum_slots(rows, out)
        else:
            sum_slots([row[lo:hi] for row in rows], out[lo:hi])
    x.finish()
    return out


def _own_row(slots: torch.Tensor, parts: torch.Tensor, me: int, lo: int,
             hi: int) -> list[torch.Tensor]:
    """Columns ``lo:hi`` of the received rows ``slots`` (``[W, c]``) in rank order, with this
    rank's own row read from ``parts`` where it already is (no copy into the inbox)."""
    return [parts[me, lo:hi] if q == me else slots[q, lo:hi] for q in range(slots.shape[0])]


@dataclasses.dataclass
class GraphPad:
    """One call's share of a graph-safe exchange (:func:`graph_pad`)."""

    pad: SignalPad
    inbox: torch.Tensor
    epoch: DeviceValue  # ``E``
    ack: int  # the first acknowledgement slot
    implied: bool = False  # the readers' acknowledgement is implied: no wait
    lane: torch.cuda.Stream | None = None  # where the bump and the acknowledgement ran
    #: if asked: this inbox's chunk-flag pad and the first slot of this call's half
    flags: tuple[SignalPad, int] | None = None


@dataclasses.dataclass(frozen=True)
class Turn:
    """A graph-safe call's half of a two-half inbox and whether the readers'
    acknowledgement is implied, decided by the caller (:func:`next_turn`) instead of
    :func:`graph_pad`'s capture bookkeeping."""

    half: int
    implied: bool


def next_turn(key: str, nbytes: int) -> Turn:
    """The :class:`Turn` of the next eager call of the graph-safe exchange ``key`` whose
    inbox holds ``nbytes``, replayed from a graph or not (``ops/replays.py``).

    Calls on one inbox take turns over its halves by a count on the host, which every rank
    advances alike (every rank makes every call), and follow each other in stream order on
    every rank: a call on another stream than the inbox's previous one first makes its
    stream wait for that one. So a call's writes into a peer's half come after my previous
    call's waits for every peer's data, and each peer sent that data after its own call
    before, the reads of the half written now included: the acknowledgement is implied
    (as with ``ACK_BY_DATA`` inside one capture), except for the first call on an inbox
    (or on a new one, after the workspaces were released), whose writes wait for it."""
    rt = current()
    inbox_key = f"{key}:graph2:{_inbox_cap(nbytes)}"
    ws = rt.cache.get(("workspace", "inbox", inbox_key))
    inbox = ws.tensors[0].data_ptr() if ws is not None else None
    # calls so far, the last one's stream and inbox address
    turns = rt.cache.setdefault(("replay_turns", inbox_key), [0, None, None])
    stream = torch.cuda.current_stream()
    if turns[1] is not None and turns[1] != stream:
        stream.wait_stream(turns[1])
    implied = ACK_BY_DATA and turns[0] > 0 and inbox is not None and inbox == turns[2]
    turn = Turn(turns[0] % 2, implied)
    turns[:] = [turns[0] + 1, stream, inbox]
    return turn


def graph_pad(key: str, dtype: torch.dtype, numel: int,
              turn: Turn | None = None, lane: bool = False, flags: bool = False) -> GraphPad:
    """The graph-safe variant of the chunked exchanges (what a CUDA graph replays): an inbox
    of ``numel`` elements, its epoch ``E`` counted on the device (bumped here), and a pad of
    ``(PULL_MAX_CHUNKS + 1) * W`` slots: ``ready`` of chunk ``i`` from rank ``q`` at ``i * W
    + q`` (set to ``E`` once it is there), then ``ack[q]``.

    Acknowledgements are sent as a call starts: right after the bump, ``ack[me]`` is set to
    ``E - 1`` on every node peer, in the current stream's order, so behind everything the
    calls before ``E`` read (a rank's calls follow each other on its stream, their side
    streams joined). A write into a peer's inbox waits for its ``ack >= E - 1``: the peer
    has started this call, so nobody still reads what it overwrites.

    ``GRAPH_HALVES = 1``: one inbox, every call waits. ``2``: calls take turns over two
    halves (by a counter on the host, so a captured graph replays the same turns on every
    rank). While capturing, if the previous call on this inbox was captured in the same
    graph (so it used the other half and precedes this one in stream order at every
    replay), the wait is implied and left out (``implied``, ``ACK_BY_DATA``): that call
    received every peer's data, which each peer sent after its own earlier calls had
    finished, the reads of this half included. The first call of a capture on each inbox,
    and every call outside a capture, waits.

    ``lane`` (CUDA): the bump and the acknowledgements run on a side stream that first
    waits for the current stream (``GraphPad.lane``), so that the current stream goes on
    at once; work that reads the epoch must follow that stream. With ``LANE_COPIES`` the
    acknowledgements are copies of the epoch cell before the bump (no kernel but the bump).

    ``turn`` (:func:`next_turn`) sets the half and whether the acknowledgement is implied
    (two halves, whatever ``GRAPH_HALVES`` says): the eager calls that ``ops/replays.py``
    replays or runs uncaptured, whose turns cannot depend on what was captured together.

    ``flags``: the call's chunk flags (``GraphPad.flags``: a pad per inbox, of
    ``PULL_MAX_CHUNKS * W`` slots per half; chunk ``i`` from rank ``q`` at ``i * W + q``
    from its half's first slot), raised to 1 by the writer and cleared by the reader's
    wait. A writer raises a flag after writing the half it announces, which it does only
    once the reader is done reading that half (the acknowledgement, or the data that
    implies it), so after the reader cleared the flag of the half's previous call. (Flags
    shared by inboxes of several sizes would not be safe: each inbox takes turns over its
    halves on its own.)

    Each power-of-two size class has its own inbox, never regrown: a graph captured with a
    small size keeps its buffer when a larger size is warmed up later. Every size shares the
    pad and its epoch."""
    halves = GRAPH_HALVES if turn is None else 2
    if halves not in (1, 2):
        raise ValueError(f"exchange.GRAPH_HALVES must be 1 or 2, got {halves!r}")
    rt = current()
    w, me = rt.world.world_size, rt.world.rank
    pad_key = f"{key}:graph" if halves == 1 else f"{key}:graph2"
    nbytes = numel * dtype.itemsize
    inbox_key = f"{pad_key}:{_inbox_cap(nbytes)}"
    turns_key = ("graph_inbox_turns", inbox_key)
    if capturing():
        if rt.cache.get(("workspace", "inbox", inbox_key)) is None:
            raise not_warmed(key)
        require_warm(key, pad_key)
    pad = signal_pad(pad_key, (PULL_MAX_CHUNKS + 1) * w)
    raw = _inbox(inbox_key, nbytes)
    ack = PULL_MAX_CHUNKS * w
    flag_pad = None
    if flags:  # made (zeroed, then a barrier on this stream) before the lane follows it
        flags_key = f"{inbox_key}:flags"
        if capturing() and rt.cache.get(("signal_pad", flags_key)) is None:
            raise not_warmed(key)
        flag_pad = signal_pad(flags_key, 2 * PULL_MAX_CHUNKS * w)
        if rt.cache.get(("stale_flags", flag_pad.signals.data_ptr())):
            raise RuntimeError(f"{key}: an earlier call on this inbox failed before it had "
                               f"pulled what its peers announced, so its chunk flags may "
                               f"still be raised; this process cannot run it with flags again "
                               f"(DITRON_PULL_FLAGS=0 uses the device epochs)")
    side = _signal_lane() if lane and rt.world.backend == "cuda" else None
    if side is None:
        epoch = bump_and_notify(pad, ack + me, rt.topo.node_ranks(), skip=me)
    else:
        start_after(side, None)
        with torch.cuda.stream(side):
            if _lane_copies():
                for q in rt.topo.node_ranks():
                    if q != me:
                        copy_value(pad, ack + me, pad.device_epoch(), q)
                epoch = bump(pad)
            else:
                epoch = bump_and_notify(pad, ack + me, rt.topo.node_ranks(), skip=me)

    def share(half: int, implied: bool) -> GraphPad:
        first = (flag_pad, half * PULL_MAX_CHUNKS * w) if flag_pad is not None else None
        return GraphPad(pad, raw[half, :nbytes].view(dtype), epoch, ack, implied, side, first)

    if halves == 1:
        return share(0, False)
    if turn is not None:
        return share(turn.half, turn.implied)
    turns = rt.cache.setdefault(turns_key, [0, None])  # calls so far, the last one's capture
    half = turns[0] % 2
    graph = capture_id()
    implied = ACK_BY_DATA and graph is not None and turns[1] == graph
    turns[0] += 1
    turns[1] = graph
    return share(half, implied)


def _lane_copies() -> bool:
    """Whether a signal lane writes by copies (``LANE_COPIES``, and the driver's copy call
    is usable: ``DITRON_STREAM_MEMOPS=0`` turns it off with the other driver calls)."""
    return LANE_COPIES and stream_memops.available()


def _signal_lane() -> torch.cuda.Stream:
    """The side stream of graph-safe exchanges' signals (:func:`graph_pad`'s ``lane``)."""
    return side_stream(current().world.device, "exchange_signals")


def _check_waits() -> None:
    rt = current()
    if (rt.wait_timeout > 0 or rt.world.backend == "cpu") and not capturing():
        from ..runtime.diagnostics import check_waits

        check_waits()


def sum_slots(slots: torch.Tensor | list[torch.Tensor],
              out: torch.Tensor | None = None) -> torch.Tensor:
    """Sum ``slots`` (a tensor, over dim 0, or a list of same-shaped tensors) in order,
    accumulating in fp32, into ``out`` (new if ``None``) in the slots' dtype. Two slots take
    one ``add``: its fp32 op-math rounds once, as the fp32 sum would."""
    if len(slots) == 2:
        return torch.add(slots[0], slots[1], out=out)
    if isinstance(slots, torch.Tensor):
        total = slots.sum(0, dtype=torch.float32)
    else:
        total = slots[0].to(torch.float32, copy=True)
        for s in slots[1:]:
            total += s
    if out is None:
        return total.to(slots[0].dtype) if slots[0].dtype != torch.float32 else total
    return out.copy_(total)
