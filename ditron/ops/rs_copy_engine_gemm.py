"""GEMM-RS in one persistent GEMM, its partials moved by the copy engine.

``gemm_rs(..., engine="copy_engine_persistent")``: the whole local GEMM is one launch of the
persistent GEMM in the scatter order (rank ``r+1``'s rows first, own rows last; no wave
boundary between the halves, no stream-ordered gap between chunks). A tile of peer ``d``'s
rows is stored *locally* into ``send[d]``; the tile order runs chunk by chunk, and after
each chunk every program of the GEMM counts it; the copy engine, on its side stream beside
the GEMM, waits (stream-ordered, no SM) for each chunk's count, pushes the chunk into
``d``'s ``recv[me]`` and raises ``d``'s ready flag; an own tile waits for its chunk's flags
and adds the peers' partials in its epilogue (fp32).

Buffers (symmetric, per shape and chunking): ``send`` and ``recv``, ``[W, seg, N]``. Pad
slots (``C`` chunks per segment):

* ``ready[c * (W-1) + k]``, ``k = (q - me - 1) % W``: rank ``q``'s chunk ``c`` is in my
  ``recv[q]``; set to 1 by ``q``'s copy engine, waited for by my own tiles of chunk ``c``;
* ``count[d * C + c]``: how many of my GEMM's ``P`` programs are past chunk ``c`` of
  ``d``'s rows; waited for (``>= P``) and cleared by my copy engine;
* ``free[d]``: ``d`` has read what I pushed it in the previous call; set by ``d`` after its
  GEMM, waited for and cleared by my copy engine before its first push to ``d``.

These are *flags* that their one waiter clears, not the epoch-valued signals of the other
ops: the copy engine compares against a constant (a stream memory operation, also inside a
CUDA graph, where the epoch would change between replays), so every flag is back at 0
before it can be raised again. Why no raise is lost: ``count`` is cleared on the engine's
stream, which the compute stream joins before the next call's GEMM adds to it; ``ready`` is
cleared on my compute stream after my GEMM, before I set ``free`` on the peers, and a peer
raises it again only after it waited for that ``free``. So one code path serves eager calls
and graph replays.
"""

from __future__ import annotations

import dataclasses

import torch
import triton

from ..engines.base import Signal, Transfer
from ..engines.sync import notify_one, notify_peers, use_stream_memops, wait_one
from ..kernels import swizzle
from ..kernels.gemm import EPI_RS_COPY_ENGINE, GemmConfig, GemmHooks, num_programs
from ..runtime.barrier import barrier
from ..runtime.signals import SignalPad, signal_pad
from ..runtime.world import current
from .exchange import PULL_MAX_CHUNKS, engine_instance
from .graphs import capturing, not_warmed
from .workspaces import alloc_buffers, cached, drop

ENGINE = "copy_engine_persistent"
#: default chunks per segment: a peer's second chunk lands while the own rows' first half
#: is computed, so no own tile waits (at most ``PULL_MAX_CHUNKS``)
DEFAULT_CHUNKS = 2


@dataclasses.dataclass(frozen=True)
class Layout:
    """Where one shape's chunks and flags are (host metadata, no heap tensors)."""

    W: int
    seg: int
    chunk_blocks: int
    chunks: int
    #: ``(lo, hi)`` rows of each chunk within a segment
    bounds: tuple[tuple[int, int], ...]

    @property
    def count_base(self) -> int:
        return self.chunks * (self.W - 1)

    @property
    def free_base(self) -> int:
        return self.count_base + self.W * self.chunks

    @property
    def slots(self) -> int:
        return self.free_base + self.W

    def ready(self, c: int, src: int, dst: int) -> int:
        """The slot on ``dst`` that ``src``'s chunk ``c`` raises."""
        return c * (self.W - 1) + (src - dst - 1) % self.W

    def count(self, d: int, c: int) -> int:
        """Chunk ``c`` of ``d``'s rows, counted (relative to ``count_base``)."""
        return d * self.chunks + c


def layout(W: int, seg: int, cfg: GemmConfig, chunk_rows: int | None) -> Layout:
    """Chunks of whole row blocks: ``chunk_rows`` rounded up to a row block (default: a
    segment in ``DEFAULT_CHUNKS``), at most ``PULL_MAX_CHUNKS`` per segment."""
    bps = triton.cdiv(seg, cfg.block_m)
    rows = chunk_rows or triton.cdiv(seg, DEFAULT_CHUNKS)
    cb = max(triton.cdiv(rows, cfg.block_m), triton.cdiv(bps, PULL_MAX_CHUNKS))
    chunks = triton.cdiv(bps, cb)
    bounds = tuple((c * cb * cfg.block_m, min(seg, (c + 1) * cb * cfg.block_m))
                   for c in range(chunks))
    return Layout(W, seg, cb, chunks, bounds)


def _workspace(tag: str, lay: Layout, N: int, dtype: torch.dtype):
    """``(send, recv, pad)``, made on first use (collective): ``free`` starts raised."""
    rt = current()
    key = _key(tag, lay, N, dtype)
    pad_key = f"{tag}:{lay.seg}x{N}:{dtype}:{lay.chunks}"
    if capturing() and rt.cache.get(("workspace", *key)) is None:
        raise not_warmed("gemm_rs")

    def build():
        bufs = alloc_buffers([((lay.W, lay.seg, N), dtype, f"{tag}:send"),
                              ((lay.W, lay.seg, N), dtype, f"{tag}:recv")], pad_key)
        pad = signal_pad(pad_key, lay.slots)
        pad.signals[lay.free_base:lay.free_base + lay.W].fill_(1)
        if rt.world.backend == "cuda" and not use_stream_memops():
            # the copy engine's waits and signals are kernels then: load them now, not
            # while a GEMM waits for them (see the launch order below)
            me = rt.world.rank
            wait_one(pad, lay.free_base + me, 1)
            notify_one(pad, lay.free_base + me, 1, me)
        barrier()  # every rank's flags are set before any copy engine reads them
        return bufs

    send, recv = cached(key, build).tensors
    return send, recv, signal_pad(pad_key, lay.slots)


def _key(tag: str, lay: Layout, N: int, dtype: torch.dtype) -> tuple:
    return (tag, lay.W, lay.seg, N, dtype, lay.chunks)


def _tables(lay: Layout, n_blocks: int, cfg: GemmConfig, me: int, device) -> tuple:
    """``(order, wait_lo, wait_hi, phases)``: the tile order (chunk by chunk of ``me+1``'s
    rows, then ``me+2``'s, ..., own rows last; grouped within each chunk), per row block
    the ready slots its tiles wait for (own blocks: their chunk's ``W - 1`` flags; others:
    none), and the phases of ``EPI_RS_COPY_ENGINE`` (a run per peer chunk, raising its
    count; the own rows, raising none)."""
    key = ("gemm_rs:persistent:tables", lay, n_blocks, cfg.group_m, me, device)
    rt = current()
    hit = rt.cache.get(key)
    if hit is None:
        bps = triton.cdiv(lay.seg, cfg.block_m)
        order: list[int] = []
        phases: list[tuple[int, int]] = []
        for step in range(1, lay.W):
            d = (me + step) % lay.W
            for c in range(lay.chunks):
                first = d * bps + c * lay.chunk_blocks
                blocks = range(first, min((d + 1) * bps, first + lay.chunk_blocks))
                order += swizzle.grouped(blocks, n_blocks, cfg.group_m)
                phases.append((len(order), lay.count(d, c)))
        order += swizzle.grouped(range(me * bps, (me + 1) * bps), n_blocks, cfg.group_m)
        phases.append((len(order), -1))
        lo = [1] * (lay.W * bps)
        hi = [0] * (lay.W * bps)
        for mb in range(me * bps, (me + 1) * bps):
            c = (mb - me * bps) // lay.chunk_blocks
            lo[mb], hi[mb] = c * (lay.W - 1), c * (lay.W - 1) + lay.W - 2
        hit = rt.cache[key] = tuple(torch.tensor(t, dtype=torch.int32, device=device)
                                    for t in (order, lo, hi, phases))
    return hit


def _queue_pushes(lay: Layout, send, recv, pad: SignalPad, me: int, programs: int,
                  since: object | None = None) -> None:
    """Queue the copy engine's side of one call (``since``: a mark taken before the GEMM's
    launch): per peer ``d``, wait for and clear ``free[d]``; per chunk, wait until each of
    the GEMM's ``programs`` has counted it and clear the count, push it, raise ``d``'s
    ready flag."""
    none = pad.signals[:0]
    moves = []
    for step in range(1, lay.W):
        d = (me + step) % lay.W
        f = lay.free_base + d
        moves.append(Transfer(none, none, me, me, Signal(pad, f, 0), after=Signal(pad, f, 1)))
        for c, (lo, hi) in enumerate(lay.bounds):
            n = lay.count_base + lay.count(d, c)
            moves.append(Transfer(none, none, me, me, Signal(pad, n, 0),
                                  after=Signal(pad, n, programs)))
            moves.append(Transfer(send[d, lo:hi], recv[me, lo:hi], me, d,
                                  Signal(pad, lay.ready(c, me, d), 1)))
    engine_instance("copy_engine").issue(moves, since=since)


def rs_copy_engine_gemm(a: torch.Tensor, b: torch.Tensor, cfg: GemmConfig,
                        chunk_rows: int | None, launch) -> torch.Tensor:
    """``reduce_scatter(a @ b)`` on one node (``W >= 2``), as the module docstring says.
    ``launch(a, b, c, M, order=, seg_rows=, cfg=, hooks=, n_blocks=, then=)`` runs the GEMM
    (the caller's traced launch), then ``then()`` before it waits for anything. Returns
    ``[M / W, N]``."""
    rt = current()
    W, me = rt.world.world_size, rt.world.rank
    M, N = a.shape[0], b.shape[1]
    seg = M // W
    if rt.world.backend == "cuda" and cfg.programs == 0 and not use_stream_memops():
        # the copy engine's waits are kernels then: leave them an SM beside the GEMM's
        # programs, which spin until the peers' copy engines have moved their chunks
        sms = torch.cuda.get_device_properties(a.device).multi_processor_count
        cfg = dataclasses.replace(cfg, programs=max(1, sms - 1))
    lay = layout(W, seg, cfg, chunk_rows)
    tag = f"gemm_rs:{ENGINE}"
    send, recv, pad = _workspace(tag, lay, N, a.dtype)
    n_blocks = triton.cdiv(N, cfg.block_n)
    order, wait_lo, wait_hi, phases = _tables(lay, n_blocks, cfg, me, a.device)
    programs = num_programs(cfg, a.device, order.numel())
    c = torch.empty((seg, N), dtype=a.dtype, device=a.device)
    hooks = GemmHooks(epilogue=EPI_RS_COPY_ENGINE, recv=recv, send=send,
                      count=pad.signals[lay.count_base:], phases=phases,
                      wait_lo=wait_lo, wait_hi=wait_hi, wait_sig=pad.signals, wait_target=1)
    engine = engine_instance("copy_engine")
    # Host order: on CUDA the GEMM is launched before the copy engine's waits for it are
    # queued (they start from a mark taken before the launch, so they run beside it): the
    # launch may load the kernel, which can synchronise the context (lazy loading), and must
    # not find queued work that waits for a kernel not launched yet. The CPU backend's
    # interpreter runs the GEMM to its end inside the launch, so its worker thread gets the
    # pushes first.
    queued = rt.world.backend == "cpu"
    if queued:
        _queue_pushes(lay, send, recv, pad, me, programs)
    start = engine.mark()
    then = None if queued else lambda: _queue_pushes(lay, send, recv, pad, me, programs,
                                                     since=start)
    try:
        launch(a, b, c, M, order=order, seg_rows=seg, cfg=cfg, hooks=hooks,
               n_blocks=n_blocks, then=then)
    except BaseException:
        if queued:
            # (a tile config that does not load fails on every rank alike) let my copy
            # engine finish, then start this workspace afresh: its flags are mid-call
            pad.signals[lay.count_base:lay.free_base].fill_(1 << 62)
            engine.drain()
            barrier()  # nobody pushes into the buffers any more
            drop(_key(tag, lay, N, a.dtype))
        raise
    engine.drain()
    # my GEMM has read every partial: clear my ready flags, then tell the peers
    pad.signals[:lay.count_base].zero_()
    notify_peers(pad, lay.free_base + me, 1, rt.topo.node_ranks(), skip=me)
    return c
