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
:func:`open_exchange` exposes the steps so that parts can be pushed one at a time.
*Chunked* exchanges move large parts in chunks, with ``ready`` counting chunks
(``e * 64 + i + 1`` once chunk ``i`` of call ``e`` is there), so that the transfer of one
chunk overlaps the publishing or summing of another; the same protocol also runs with
pulls (each rank publishes, peers read). :class:`Chunked` holds one call's chunk signals,
with the epoch counted on the host or, for CUDA graphs, on the device (:func:`graph_pad`),
for the collectives of ``chunked_exchanges.py`` and the copy-engine GEMM-RS
(``rs_copy_engine.py``). Eagerly on CUDA the collectives issue the same steps as driver
calls by address (``raw_pushes.py``).
"""

from __future__ import annotations

import dataclasses

import torch

from ..engines.base import Engine, Signal, Transfer, get_engine
from ..engines.copy_engine import side_stream
from ..engines.streams import join, mark_current, start_after
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
from ..runtime.config import env_flag, env_int
from ..runtime.dtypes import accumulator
from ..runtime.heap import ALIGNMENT
from ..runtime.signals import DeviceValue, SignalPad, signal_pad
from ..runtime.stream_order import StreamOrder
from ..runtime.world import current
from .graphs import capture_id, capturing, not_warmed, require_warm
from .workspaces import alloc_buffers, allocate, cached, drop


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


def inbox_and_pad(key: str, nbytes: int, slots: int) -> tuple[torch.Tensor, SignalPad]:
    """The inbox of exchange ``key`` (:func:`_inbox`) and its signal pad of ``slots``
    signals (``signal_pad(key, slots)``), fetched together: a pad that finds the heap full
    frees every cached workspace (this inbox too) and both are fetched again
    (``workspaces.allocate``)."""
    return allocate(lambda: (_inbox(key, nbytes), signal_pad(key, slots)))


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
    node: range  # the peers whose parts come through shared memory (none with "network")
    engine: str
    recvs: dict[int, tuple[int, int]]
    #: the peers :meth:`finish` acknowledges: every node peer, whatever the engine (a later
    #: call on the key may push through shared memory, and waits for this call's ack)
    acked: range = range(0, 0)
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
            notify_peers(self.pad, rt.world.world_size + me, self.epoch, self.acked, skip=me)
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
    caller's protocol implies the acknowledgement, so no rank waits for it or sends it
    (``ACK_BY_DATA`` may change between calls: a call with acknowledgements waits only for
    those that were sent).
    That holds where, in every call, each rank waits (stream-ordered, before the call
    returns) for data from every node peer that the peer wrote or announced only after the
    reads of its previous call were done, in its stream order: then my call ``e - 1``
    waited for what each peer sent after it had read its share of call ``e - 2``, the half
    call ``e`` writes. It takes the calls on ``key`` to follow each other in one stream
    order per rank: a call on another stream than the previous one first waits for that
    one (CUDA; the pad's ``next_epoch`` sees to it).
    """
    refuse_capture(key)
    rt = current()
    w, me = rt.world.world_size, rt.world.rank
    nbytes = inbox_numel * dtype.itemsize
    # the epoch only once nothing can fail (a call that raised would leave an epoch nobody
    # acknowledges, and the call after next would wait for it forever)
    raw, pad = inbox_and_pad(key, nbytes, 2 * w)
    epoch = pad.next_epoch()
    inbox = raw[epoch % 2, :nbytes].view(dtype)
    node = rt.topo.node_ranks()
    shm = range(0, 0) if engine == "network" else node
    acks = not (implied and ACK_BY_DATA)
    # with ``implied`` (one setting per key), ``ACK_BY_DATA`` may differ from call to call
    sent = _acknowledged(key, pad, epoch, acks) if implied else True
    if epoch > 2 and acks and sent:
        wait_slots(pad, w, node, epoch - 2, skip=me)
    return Call(pad, epoch, inbox, shm, engine, recvs, acked=node, acks=acks)


def _acknowledged(key: str, pad: SignalPad, epoch: int, acks: bool) -> bool:
    """Record whether call ``epoch`` of ``key`` acknowledges; return whether call
    ``epoch - 2`` did. A call whose acknowledgement was implied sent none, and needs none:
    its key's protocol implies it (``open_exchange``'s ``implied``), so ``ACK_BY_DATA`` may
    change between calls (an A/B switch) without a call waiting for what nobody sent."""
    cache = current().cache
    last = cache.get(("exchange_acks", key))
    if last is None or last[0] is not pad:  # a new pad counts its epochs from 1 again
        last = cache[("exchange_acks", key)] = (pad, {})
    sent = last[1]
    sent[epoch] = acks
    return sent.pop(epoch - 2, True)


def exchange(key: str, dtype: torch.dtype, inbox_numel: int, parts: list[Part],
             recvs: dict[int, tuple[int, int]], engine: str) -> Call:
    """Move ``parts`` into the peers' inboxes and wait for mine to fill (all parts at once:
    :func:`open_exchange`, :meth:`Call.push`, :meth:`Call.wait`)."""
    call = open_exchange(key, dtype, inbox_numel, recvs, engine)
    call.push(parts)
    call.wait()
    return call


#: chunks per part of a chunked exchange at most (and per segment of the graph-safe
#: copy-engine GEMM-RS)
PULL_MAX_CHUNKS = 8
#: ready values of call ``e`` are ``e * CHUNK_SLOTS + i + 1`` for chunk ``i``
CHUNK_SLOTS = 64
#: halves of the graph-safe variants' inbox (:func:`graph_pad`; every inbox has two): 2
#: (calls take turns; captured calls then need no acknowledgement wait, ``ACK_BY_DATA``)
#: or 1 (every call waits for the acknowledgement of the one before). Each setting has its
#: own pad and inboxes (read at call time, so both may be used in turn); env
#: ``DITRON_GRAPH_HALVES`` sets it at import
GRAPH_HALVES = env_int("DITRON_GRAPH_HALVES", 0) or 2
#: with two halves, a captured call whose inbox's previous call was captured in the same
#: graph writes without waiting for the readers' acknowledgement: that call received every
#: peer's data, which each peer sent after finishing its own earlier calls, the reads of
#: this half included (:func:`graph_pad`). Eagerly, exchanges opened with ``implied``
#: (the copy-engine GEMM-RS) neither wait for acknowledgements nor send them, by the same
#: argument (:func:`open_exchange`). Off: every call waits (as with one half)
ACK_BY_DATA = env_flag("DITRON_ACK_BY_DATA", True)
#: a graph-safe signal lane's publishes and acknowledgements are copy-engine writes of the
#: epoch cell (no kernel, no SM; :func:`graph_pad`), else one-thread kernels on the lane
LANE_COPIES = env_flag("DITRON_LANE_COPIES", True)
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
PULL_FLAGS = env_flag("DITRON_PULL_FLAGS")
#: eager exchanges opened with ``lane`` (the pulled GEMM-RS) raise their chunks' ready
#: values from the signal lane too (a stream write there after an event of the current
#: stream), not between the current stream's GEMM pieces, where each cost 10-12 us on 2
#: H200s (``docs/perf.md``, session 24). Env ``DITRON_EAGER_SIGNAL_LANE``
EAGER_SIGNAL_LANE = env_flag("DITRON_EAGER_SIGNAL_LANE", True)


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
    # calls so far, the order of their streams and the last one's inbox address
    turns = rt.cache.get(("replay_turns", inbox_key))
    if turns is None:
        turns = rt.cache[("replay_turns", inbox_key)] = [0, StreamOrder(rt.world.device), None]
    turns[1].follow()
    implied = ACK_BY_DATA and turns[0] > 0 and inbox is not None and inbox == turns[2]
    turn = Turn(turns[0] % 2, implied)
    turns[0] += 1
    turns[2] = inbox
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
        raise ValueError(f"exchange.GRAPH_HALVES (DITRON_GRAPH_HALVES) must be 1 or 2, got "
                         f"{halves!r}")
    rt = current()
    w, me = rt.world.world_size, rt.world.rank
    pad_key = f"{key}:graph" if halves == 1 else f"{key}:graph2"
    nbytes = numel * dtype.itemsize
    inbox_key = f"{pad_key}:{_inbox_cap(nbytes)}"
    turns_key = ("graph_inbox_turns", inbox_key)
    flags_key = f"{inbox_key}:flags"
    if capturing():
        if rt.cache.get(("workspace", "inbox", inbox_key)) is None:
            raise not_warmed(key)
        require_warm(key, pad_key)
        if flags and rt.cache.get(("signal_pad", flags_key)) is None:
            raise not_warmed(key)

    def inbox_and_pads() -> tuple[torch.Tensor, SignalPad, SignalPad | None]:
        # the inbox first: a pad that finds the heap full frees the cached workspaces,
        # this inbox too, and all three are fetched again. Flags: made (zeroed, then a
        # barrier on this stream) before the lane follows it
        return (_inbox(inbox_key, nbytes), signal_pad(pad_key, (PULL_MAX_CHUNKS + 1) * w),
                signal_pad(flags_key, 2 * PULL_MAX_CHUNKS * w) if flags else None)

    # everything that can fail before the bump: a failed call takes no epoch
    raw, pad, flag_pad = allocate(inbox_and_pads)
    ack = PULL_MAX_CHUNKS * w
    if flag_pad is not None:
        if rt.cache.get(("stale_flags", flag_pad.signals.data_ptr())):
            raise RuntimeError(f"{key}: an earlier call on this inbox failed before it had "
                               f"pulled what its peers announced, so its chunk flags may "
                               f"still be raised; this process cannot run it with flags again "
                               f"(DITRON_PULL_FLAGS=0 uses the device epochs)")
    side = _signal_lane() if lane and rt.world.backend == "cuda" else None
    pad.order.follow()  # on the issuing stream: the signal lane below only follows it
    if side is None:
        epoch = bump_and_notify(pad, ack + me, rt.topo.node_ranks(), skip=me, follow=False)
    else:
        start_after(side, None)
        with torch.cuda.stream(side):
            if _lane_copies():
                for q in rt.topo.node_ranks():
                    if q != me:
                        copy_value(pad, ack + me, pad.device_epoch(), q)
                epoch = bump(pad, follow=False)
            else:
                epoch = bump_and_notify(pad, ack + me, rt.topo.node_ranks(), skip=me,
                                        follow=False)

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


def reduce_slots(slots: torch.Tensor | list[torch.Tensor], out: torch.Tensor | None = None,
                 op: str = "sum") -> torch.Tensor:
    """Reduce ``slots`` (a tensor, over dim 0, or a list of same-shaped tensors) in order
    with ``op`` (``runtime.dtypes.OPS``) into ``out`` (new if ``None``) in the slots' dtype.
    Sums and averages accumulate in ``runtime.dtypes.accumulator`` of the dtype (fp32 for
    16-bit floats; two slots take one ``add``, whose fp32 op-math rounds once, as the fp32
    sum would); an average divides the sum by the number of slots before rounding; max
    and min propagate NaN, as ``torch.maximum`` does."""
    if op in ("max", "min"):
        pick = torch.maximum if op == "max" else torch.minimum
        if out is not None and len(slots) > 2 and any(_shares(out, s) for s in slots[2:]):
            # a later slot is out's memory (an in-place reduce-scatter: out is this rank's
            # row of its input): the running result would overwrite it before it is read
            return out.copy_(reduce_slots(slots, None, op))
        total = pick(slots[0], slots[1], out=out) if len(slots) > 1 else None
        if total is None:
            return slots[0].clone() if out is None else out.copy_(slots[0])
        for s in slots[2:]:
            pick(total, s, out=total)
        return total
    dtype = slots[0].dtype
    if len(slots) == 2 and op == "sum":
        return torch.add(slots[0], slots[1], out=out)
    acc = accumulator(dtype)
    if isinstance(slots, torch.Tensor):
        total = slots.sum(0, dtype=acc)
    else:
        total = slots[0].to(acc, copy=True)
        for s in slots[1:]:
            total += s
    if op == "avg":
        total /= len(slots)
    if out is None:
        return total.to(dtype) if dtype != acc else total
    return out.copy_(total)


def _shares(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Whether ``a`` and ``b`` may overlap in memory (the same storage)."""
    return a.untyped_storage().data_ptr() == b.untyped_storage().data_ptr()
