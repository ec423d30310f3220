"""GEMM-RS on one node by the copy engine, by segments: the partial product of each
peer's rows is computed with ``torch.matmul`` (cuBLAS) in chunks and moved by the copy
engine while the next chunk is computed, through the chunked exchange of
``ops/exchange.py`` (host epochs eagerly, device epochs under CUDA graphs).

* :func:`pushed` (``gemm_rs(engine="copy_engine")``): each chunk is pushed into its owner's
  inbox; the owner sums the partials after its own rows' GEMM.
* :func:`pulled` (``gemm_rs(engine="copy_engine_pull")``): each chunk is computed into the
  rank's own inbox and published; its owner pulls it into the result and its own rows'
  GEMM accumulates onto it (``addmm_``): no separate sum.
"""

from __future__ import annotations

import itertools

import torch

from ..engines.base import Transfer
from ..engines.streams import MARK_RING
from ..engines.sync import use_stream_memops
from ..runtime.world import current
from . import exchange
from .exchange import CHUNK_SLOTS, PULL_MAX_CHUNKS, engine_instance, open_chunked, reduce_slots

#: default chunks per segment of the copy-engine GEMM-RS (``chunk_rows`` overrides): on 2
#: H200s each extra chunk cost ~100 us of host time (``docs/perf.md``, session 6), so only
#: the tuner splits segments, where that paid
RS_CHUNKS = 1
#: default chunks per segment of the pulled copy-engine GEMM-RS: the own rows' first chunk
#: needs only the peers' first chunks, which land while the peers compute their second
RS_PULL_CHUNKS = 2
#: graph-safe pulled GEMM-RS: the exchange's signals (its acknowledgement, the epoch bump,
#: the chunk publishes) run on a side stream (``exchange.graph_pad``'s ``lane``), so that
#: the compute stream runs nothing but the GEMM pieces (``docs/perf.md``, session 24)
RS_SIGNAL_LANE = True


def _early_span(W: int, me: int, seg: int, early_rows: int) -> tuple[int, int]:
    """The own rows (within my segment) that ``early_rows`` moves into the last peer's GEMM:
    the ones next to that peer's rows in ``a`` (my first rows when the last peer, ``me - 1``,
    comes before me; my last ones with two ranks on rank 0, where it comes after), or none
    (``(0, 0)``) where they are not neighbours (rank 0 of more than two)."""
    if early_rows == 0 or (me == 0 and W > 2):
        return 0, 0
    return (0, early_rows) if me > 0 else (seg - early_rows, seg)


def pushed(a: torch.Tensor, b: torch.Tensor, chunk_rows: int | tuple[int, ...] | None = None,
           graph: bool = False, early_rows: int = 0) -> torch.Tensor:
    """GEMM-RS on one node with the copy engine, by segments, in chunks of ``chunk_rows``
    rows or of the sizes it lists (default: a segment in ``RS_CHUNKS``, i.e. whole).

    For ``d = r+1, r+2, ...`` the partial of each chunk of ``d``'s rows is computed
    (``torch.matmul``) and pushed by the copy engine into slot ``me`` of ``d``'s inbox,
    raising ``ready[me]`` on ``d`` to ``e * 64 + i + 1`` for chunk ``i``; the engine's stream
    starts after that chunk's GEMM and runs beside the next ones (the exchange of
    ``ops/exchange.py``: double-buffered inbox, ready epochs; the acknowledgement is implied
    by the data, ``open_exchange``'s ``implied`` with ``exchange.ACK_BY_DATA``, else sent
    after the sums and waited for two calls later). The own rows come last,
    straight into slot ``me`` of my inbox, with no wait: the peers' chunks land meanwhile.
    Then chunk ``i`` of the result is summed (fp32, rank order) once every peer's chunk ``i``
    is in.

    ``early_rows`` (one chunk per segment only): that many of my own rows, the ones next to
    the last peer's segment in ``a`` (:func:`_early_span`), are computed in the same
    ``torch.matmul`` as that segment, before it is pushed; the rest of my rows follow. Two
    GEMMs of ``seg + x`` and ``seg - x`` rows can run in fewer waves than two of ``seg``
    (cuBLAS at N = 3584 on an H200: 0.98x the whole GEMM's time for ``x = 1152`` of 4096,
    against 1.09x for halves; ``docs/perf.md``, session 15); the tuner picks ``x``.

    ``graph``: the graph-safe variant (what a CUDA graph replays): the exchange's graph-safe
    inbox (one, or two halves taking turns: ``exchange.GRAPH_HALVES``) with its epoch ``E``
    counted on the device (``exchange.graph_pad``); chunk ``i`` from rank ``q`` raises slot
    ``i * W + q`` to ``E``; the first push to ``d`` waits on the engine's stream for ``d``'s
    acknowledgement of call ``E - 1`` (it has summed what this rank sent it), which ``d``
    sends as its call ``E`` starts, behind those sums in its stream order (no wait where
    ``graph_pad`` finds it implied). At most ``exchange.PULL_MAX_CHUNKS`` chunks per
    segment."""
    chunks = len(segment_bounds(a.shape[0] // current().world.world_size, chunk_rows,
                                 RS_CHUNKS, graph))
    if early_rows and chunks > 1:  # before the exchange opens
        raise ValueError(f"ditron.ops.gemm_rs: early_rows={early_rows} needs one chunk per "
                         f"segment, got chunk_rows={chunk_rows} ({chunks} chunks)")
    W, me, seg, N, bounds, x, slots, engine = _open_segments(
        "gemm_rs:copy_engine", a, b, chunk_rows, RS_CHUNKS, graph)
    e_lo, e_hi = _early_span(W, me, seg, early_rows)
    early = None
    for step in range(1, W):
        d = (me + step) % W
        for i, (lo, hi) in enumerate(bounds):
            if step == W - 1 and e_hi > e_lo:
                # d's rows and my early rows are neighbours in a: one GEMM for both
                start, stop = min(d * seg, me * seg + e_lo), max((d + 1) * seg, me * seg + e_hi)
                both = torch.matmul(a[start:stop], b)
                part = both[d * seg - start:(d + 1) * seg - start]
                early = both[me * seg + e_lo - start:me * seg + e_hi - start]
            else:
                part = torch.matmul(a[d * seg + lo:d * seg + hi], b)
            # the engine's one stream orders a segment's later chunks behind the first,
            # so only the first waits for d's acknowledgement
            engine.issue([Transfer(part, slots[me, lo:hi], me, d, x.ready(i, me),
                                   after=x.after(d) if i == 0 else None)])
    out = torch.empty((seg, N), dtype=a.dtype, device=a.device)
    late = (e_hi, seg) if e_lo == 0 else (0, e_lo)
    torch.matmul(a[me * seg + late[0]:me * seg + late[1]], b, out=slots[me, late[0]:late[1]])
    for i, (lo, hi) in enumerate(bounds):
        if hi > lo:
            x.wait(i)
            if early is None:
                reduce_slots(slots[:, lo:hi], out[lo:hi])
                continue
            reduce_slots(slots[:, late[0]:late[1]], out[late[0]:late[1]])
            reduce_slots([early if q == me else slots[q, e_lo:e_hi] for q in range(W)],
                      out[e_lo:e_hi])
    x.finish([engine])
    return out


def _open_segments(key: str, a: torch.Tensor, b: torch.Tensor,
                   chunk_rows: int | tuple[int, ...] | None, default_chunks: int,
                   graph: bool, lane: bool = False, flags: bool = False):
    """What both copy-engine GEMM-RS variants start with: ``(W, me, seg, N, bounds, x,
    slots, engine)``, the segment of ``seg = M / W`` rows cut into chunks at ``bounds``
    (:func:`segment_bounds`), one call ``x`` of the chunked exchange ``key`` with its
    inbox as ``slots`` (``[W, seg, N]``), and the copy engine."""
    rt = current()
    W, me = rt.world.world_size, rt.world.rank
    seg, N = a.shape[0] // W, b.shape[1]
    bounds = segment_bounds(seg, chunk_rows, default_chunks, graph)
    # every rank waits for every peer's chunks, sent after its previous call's reads:
    # acknowledgements implied by data eagerly (exchange.open_exchange)
    x = open_chunked(key, a.dtype, W * seg * N, "copy_engine", graph, lane=lane, flags=flags,
                     implied=True)
    return W, me, seg, N, bounds, x, x.inbox.view(W, seg, N), engine_instance("copy_engine")


def max_chunks(graph: bool) -> int:
    """The most chunks a segment may have: as many as the exchange has signals for
    (``PULL_MAX_CHUNKS`` with device epochs, the graph-safe variants)."""
    return PULL_MAX_CHUNKS if graph else CHUNK_SLOTS - 1


def check_chunk_count(chunk_rows: tuple[int, ...], graph: bool) -> None:
    """Refuse chunk sizes ``chunk_rows`` (a tuple) listing more chunks than
    :func:`max_chunks` (``ValueError``). ``gemm_rs`` checks it before choosing a path, so
    the call raises on every path, not only where it takes a copy engine."""
    most = max_chunks(graph)
    if len(chunk_rows) > most:
        raise ValueError(f"ditron.ops.gemm_rs: at most {most} chunks per segment here"
                         f"{' (graph-safe)' if graph else ''}, got chunk_rows={chunk_rows}")


def segment_bounds(seg: int, chunk_rows: int | tuple[int, ...] | None, default_chunks: int,
                    graph: bool) -> list[tuple[int, int]]:
    """A segment of ``seg`` rows cut into chunks ``[(lo, hi), ...]``: equal ones of at most
    ``chunk_rows`` rows (default: ``default_chunks`` chunks; at most as many as the exchange
    has signals for, ``PULL_MAX_CHUNKS`` with device epochs), or the sizes ``chunk_rows``
    lists."""
    most = max_chunks(graph)
    if isinstance(chunk_rows, tuple):
        check_chunk_count(chunk_rows, graph)
        ends = list(itertools.accumulate(chunk_rows))
        return list(zip([0, *ends[:-1]], ends, strict=True))
    rows = chunk_rows or -(-seg // default_chunks)
    chunks = min(-(-seg // max(rows, 1)), most) if seg else 1
    return [(seg * i // chunks, seg * (i + 1) // chunks) for i in range(chunks)]


def pulled(a: torch.Tensor, b: torch.Tensor, chunk_rows: int | tuple[int, ...] | None = None,
           graph: bool = False) -> torch.Tensor:
    """GEMM-RS on one node with the copy engine: peers' partials pulled into the result,
    the own rows' GEMM accumulating onto them (``addmm``), in chunks of ``chunk_rows`` rows
    or of the sizes it lists (default: a segment in ``RS_PULL_CHUNKS``).

    For ``d = r+1, r+2, ...`` the partial of each chunk ``i`` of ``d``'s rows is computed
    (``torch.matmul``) into slot ``d`` of my inbox, then published: ``ready[me]`` on ``d``
    only (chunk signals of ``exchange.Chunked``). Meanwhile my engine pulls chunk ``i`` of my
    rows from slot ``me`` of each peer's inbox once that peer published it: from ``r-1``
    (the first to compute my rows) straight into the result, from the others into a
    scratch that is added to it. The pulls start after my first GEMM (``Engine.mark``;
    queued first, so that the host's prologue is short), so they run beside my peers'
    GEMMs (where the engine's waits spin on an SM: after my own GEMM of the same step and
    chunk); they are issued after every
    publish (a spinning wait must never be queued before what the peers wait for,
    ``docs/developing.md``, "host order"). Chunk ``i`` of the result is then
    ``out += a_own @ b`` (``addmm_``, fp32 accumulation, one rounding with two ranks): no
    pass over the received partials after the GEMM. Eagerly the acknowledgement is implied
    by the data (``open_exchange``'s ``implied`` with ``exchange.ACK_BY_DATA``: none is sent
    or waited for); else I acknowledge once my last pull landed.

    ``graph``: device epochs (``exchange.graph_pad``); each rank waits for every reader's
    acknowledgement of the previous call (sent as the reader's next call starts) before its
    first GEMM writes into its inbox, unless ``graph_pad`` finds it implied. The
    signals then run on the exchange's signal lane (``RS_SIGNAL_LANE``): the pulls start
    after its marks, which follow the epoch bump and the publish of the matching chunk.
    With ``exchange.PULL_FLAGS`` the chunks are announced by flags that the pulls clear,
    so the engine's waits are stream waits (no SM) under graphs too."""
    W, me, seg, N, bounds, x, slots, engine = _open_segments(
        "gemm_rs:copy_engine_pull", a, b, chunk_rows, RS_PULL_CHUNKS, graph,
        lane=RS_SIGNAL_LANE, flags=graph and exchange.PULL_FLAGS)
    x.free()
    # Where the engine's waits are spinning kernels (graph-safe, or no stream memory
    # operations), a wait queued from the start holds an SM for the whole GEMM it waits
    # beside, and cuBLAS's cooperative kernels then run their last tiles late (1.8x one
    # GEMM's time on an H200, docs/perf.md session 15). So the pull of chunk i from the
    # peer of step s starts after my own step-s GEMM of chunk i, when that peer's is
    # about done too.
    spins = not use_stream_memops() or (graph and x.flags is None)
    try:
        marks: dict[tuple[int, int], object] = {}
        for step in range(1, W):
            d = (me + step) % W
            for i, (lo, hi) in enumerate(bounds):
                torch.matmul(a[d * seg + lo:d * seg + hi], b, out=slots[d, lo:hi])
                x.publish(i, d)
                if not marks:  # after the first GEMM is queued: the host's prologue is short
                    # what the pulls write into exists before the mark they start after:
                    # anything queued on it (a fill, a previous owner's kernels) is behind it
                    out = torch.empty((seg, N), dtype=a.dtype, device=a.device)
                    extra = (torch.empty((W - 2, seg, N), dtype=a.dtype, device=a.device)
                             if W > 2 else None)
                    start = marks[step, i] = x.mark(engine)
                elif spins and len(marks) < MARK_RING - 1:  # ``start`` must stay valid
                    marks[step, i] = x.mark(engine)
        peers = [(me - step) % W for step in range(1, W)]  # in the order they reach my rows
        land = {q: out if k == 0 else extra[k - 1] for k, q in enumerate(peers)}
        own = a[me * seg:(me + 1) * seg]
        for i, (lo, hi) in enumerate(bounds):
            pulls = [Transfer(slots[me, lo:hi], land[q][lo:hi], q, me, after=x.ready(i, q),
                              clear_after=x.flags is not None) for q in peers]
            if spins:
                for step, pull in enumerate(pulls, start=1):
                    engine.issue([pull], since=marks.get((step, i), start))
            else:
                engine.issue(pulls, since=start)
            engine.drain()
            if i == len(bounds) - 1:
                x.finish([engine])
            if hi > lo:
                if extra is not None:
                    reduce_slots([out[lo:hi], *extra[:, lo:hi]], out[lo:hi])
                out[lo:hi].addmm_(own[lo:hi], b)
    except BaseException:
        x.abandon()  # with flags, some may stay raised
        raise
    return out
