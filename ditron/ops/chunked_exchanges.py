"""The copy engine's all-gather and reduce-scatter on one node, as chunked exchanges
(the protocol of ``exchange.py``): a part moves in chunks (:func:`chunk_bounds`), with
``ready`` counting chunks, so that the transfer of one chunk overlaps the publishing,
copying out or summing of another.

* :func:`pull_gather`: each rank publishes its part into its inbox, its peers pull it;
* :func:`push_gather`: each rank pushes its part into its peers' inboxes;
* :func:`gather_on_node`: one of the two, as ``GATHER_BY`` says;
* :func:`push_reduce_scatter`: each rank pushes row ``q`` of its parts into ``q``'s
  inbox, which sums them.

Eagerly on CUDA their steps are driver calls by address (``raw_pushes.py``); ``graph``
takes the graph-safe variants (device epochs, ``exchange.graph_pad``).
"""

from __future__ import annotations

import dataclasses
import functools
import os

import torch

from ..engines.base import Engine, Transfer
from ..engines.sync import notify_peers, use_stream_memops
from ..runtime.config import env_bytes, env_flag, env_int
from ..runtime.world import current
from .exchange import PULL_MAX_CHUNKS, Chunked, Turn, engine_instance, open_chunked, reduce_slots
from .raw_pushes import open_raw, usable

#: chunked exchanges cut a part into chunks of about this many bytes (at most
#: ``PULL_MAX_CHUNKS``; env ``DITRON_PULL_CHUNK_BYTES``), so that the transfer of one chunk
#: overlaps the publishing or summing of another
PULL_CHUNK_BYTES = 64 << 20
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
PUSH_LANES = env_int("DITRON_PUSH_LANES", 0) or 1
#: graph-safe pushes raise their chunk signals from a stream of their own
#: (``CopyEngine(signal_lane=True)``), so that the copies of a side stream follow each
#: other without a signal kernel between them (env ``DITRON_PUSH_SIGNAL_LANE``: 0 turns
#: it off; 2 H200s under graphs, one lane: the reduce-scatter 1.03-1.10x faster than two
#: lanes without it at 256 MB-1 GB, the all-gather by pushes 1.01-1.04x, docs/perf.md,
#: session 19). Eagerly the signals are stream memory operations and stay in line
PUSH_SIGNAL_LANE = env_flag("DITRON_PUSH_SIGNAL_LANE", True)
#: how the copy engine's all-gather on one node moves: ``"pull"`` (:func:`pull_gather`:
#: each rank publishes its part into its inbox, its peers copy it out), ``"push"``
#: (:func:`push_gather`: each rank copies its part into its peers' inboxes, they copy it
#: out), or ``None``: pushes (2 H200s: 1.01-1.12x faster than pulls eagerly from 96 MB to
#: 1 GB, session 18; under graphs, with the signals at high priority on their own lane,
#: 1.07-1.10x faster from 256 MB, session 19; docs/perf.md); env ``DITRON_GATHER_BY``
GATHER_BY: str | None = os.environ.get("DITRON_GATHER_BY") or None
#: a graph-safe push whose first copy waits for no acknowledgement starts after the work
#: queued before the call, not behind its epoch bump (the chunk signals, which carry the
#: epoch, still follow the bump): one kernel less before the first copy
EARLY_PUSHES = True


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
    big = max(1, env_bytes("DITRON_PULL_CHUNK_BYTES", PULL_CHUNK_BYTES) // itemsize)
    growth = env_int("DITRON_CHUNK_TAPER", TAPER_GROWTH)  # 0 or 1: chunks of one size
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

    ``graph``: the graph-safe variant (``exchange.graph_pad``: device epochs; one inbox or
    two halves taking turns, as ``exchange.GRAPH_HALVES`` says).
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
    if gather_by() == "push":
        push_gather(key + ".push", flat, out, engine, graph)
    else:
        pull_gather(key + ".pull", flat, out, engine, graph)


def gather_by() -> str:
    """``"push"`` or ``"pull"``, as ``GATHER_BY`` says; ``ValueError`` for any other value
    (ops call this before they move anything, so a bad ``DITRON_GATHER_BY`` stops a call
    before its first exchange, not between two)."""
    if GATHER_BY is None:
        return "push"
    if GATHER_BY not in ("push", "pull"):
        raise ValueError(f"chunked_exchanges.GATHER_BY (DITRON_GATHER_BY) must be 'pull', "
                         f"'push' or None, got {GATHER_BY!r}")
    return GATHER_BY


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
                        out: torch.Tensor | None = None, op: str = "sum") -> torch.Tensor:
    """Reduce-scatter on one node by pushes: returns the reduction (``op``, as
    :func:`reduce_slots`) over ranks of their row ``me`` of ``parts`` (``[W, c]``,
    contiguous), in ``parts``' dtype (into ``out``, ``[c]``, when given).

    The exchange's protocol per chunk (:func:`chunk_bounds` of a row, tapered):
    after the ``ack`` wait of :func:`open_exchange`, chunk ``i`` of row ``q`` goes from
    ``parts`` straight into ``q``'s inbox (slot ``me``) with ``engine``, raising ``ready[me]``
    on ``q`` to ``e * 64 + i + 1``; I reduce chunk ``i`` once every node peer's ``ready`` has
    reached that value, so sums of early chunks overlap the transfer of later ones;
    :meth:`Call.finish` acks after the last read.

    ``graph``: the graph-safe variant (``exchange.graph_pad``: device epochs; one inbox or
    two halves taking turns, as ``exchange.GRAPH_HALVES`` says; the pushes take turns over
    ``PUSH_LANES`` streams, the first push to ``q`` on each waiting for ``q``'s ack of the
    previous call unless ``graph_pad`` finds it implied; ``turn``: ``graph_pad``'s).
    """
    rt = current()
    w, me = rt.world.world_size, rt.world.rank
    c = parts.shape[1]
    bounds = chunk_bounds(c, parts.element_size(), taper=True, min_bytes=_taper_min(graph))
    if usable(engine, graph) and parts.is_contiguous():
        return _push_reduce_scatter_raw(key, parts, bounds, out, op)
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
        reduce_slots(_own_row(slots, parts, me, lo, hi), out[lo:hi], op)
    x.finish([eng])
    return out


def _push_reduce_scatter_raw(key: str, parts: torch.Tensor,
                             bounds: tuple[tuple[int, int], ...],
                             out: torch.Tensor | None = None, op: str = "sum") -> torch.Tensor:
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
            reduce_slots(rows, out, op)
        else:
            reduce_slots([row[lo:hi] for row in rows], out[lo:hi], op)
    x.finish()
    return out


def _own_row(slots: torch.Tensor, parts: torch.Tensor, me: int, lo: int,
             hi: int) -> list[torch.Tensor]:
    """Columns ``lo:hi`` of the received rows ``slots`` (``[W, c]``) in rank order, with this
    rank's own row read from ``parts`` where it already is (no copy into the inbox)."""
    return [parts[me, lo:hi] if q == me else slots[q, lo:hi] for q in range(slots.shape[0])]
