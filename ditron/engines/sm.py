"""SM engine: a Triton load/store kernel on a configurable number of programs.

One launch moves a batch of transfers: program ``(p, t)`` copies blocks ``p, p + P, ...``
of transfer ``t`` (``P`` = ``programs``; more than 65535 transfers, CUDA's largest
``grid.y``, launch in pieces of that many), reading and writing through
``ditron.language.translate`` so either side may be a peer's heap. With ``reduce`` it adds
the source into the destination (in fp32 for 16- and 32-bit floats, rounded once to the
nearest, ties to even, on the CPU backend too: ``runtime/interpret.py``; else in the
type itself; ``runtime/dtypes.py``) instead of overwriting. The last program to finish a
transfer (a per-transfer counter, reset by that program) raises the transfer's signal
with ``notify`` (release, system scope), so the consumer sees every block.

Transfers of one batch are grouped by (dtype, reduce, signal value), one launch per group
(in that order), whose transfers move at once: transfers of a group that write memory
another of them reads or writes (two sums into one buffer, a copy out of a buffer that
another fills) are refused, since on a GPU their programs race (the copy engine moves a
batch in order). Tensors must be contiguous, and a moved dtype outside
``runtime/dtypes.py``'s native ones (``bool``, fp8, ``int16``, ``complex64``, ...) moves bit
for bit as its carrier. Every transfer of a batch is checked (ranks, the remote side inside
its peer's heap) before any launch. With ``concurrent=True`` (CUDA) the kernels run on a
side stream, beside later work of the issuing stream, until :meth:`drain`; without it on
the issuing stream, and an issue on another stream than the engine's previous one first
waits for that one (the launches share the tables' counters: ``runtime/stream_order.py``).
Descriptor tables are cached by their contents (the last ``_CACHE_LIMIT`` of them, and
every one a CUDA graph captured), so repeated calls on the same buffers launch without
host-to-device copies. A table the cache lets go keeps its memory from reuse until the
launches that read it, on whatever stream, have passed (``streams.Kept``).
"""

from __future__ import annotations

from collections import OrderedDict

import torch
import triton
import triton.language as tl

from .. import language as dl
from ..runtime.cuda_graphs import capturing
from ..runtime.dtypes import carried, carrier, check_moved, check_summed, tl_accumulator
from ..runtime.grid_math import GRID_YZ_MAX
from ..runtime.integers import check_int
from ..runtime.stream_order import StreamOrder
from ..runtime.triton_launch import FastKernel
from ..runtime.world import current
from .base import Engine, Transfer, check_transfer, endpoints, named, register_engine, signal_slot
from .streams import Kept, SideLane, launch_stream

# Descriptor row: src address, dst address, numel, src rank, dst rank, signal address
# (0: none), signal rank.
_FIELDS = 7
_CACHE_LIMIT = 256


@triton.jit
def _as_ptr(addr, like):
    return addr.to(tl.uint64, bitcast=True).to(like.dtype, bitcast=True)


@triton.jit(do_not_specialize=["value"])
def _move_kernel(desc, typed, sig_typed, counters, value, ctx, BLOCK: tl.constexpr,
                 REDUCE: tl.constexpr, VEC: tl.constexpr, ACC: tl.constexpr):
    pid = tl.program_id(0)
    nprog = tl.num_programs(0)
    t = tl.program_id(1)
    row = desc + t * 7
    # VEC: every address is 16-byte aligned and every count a multiple of VEC elements (the
    # host checked); telling the compiler lets the copies run in 16-byte vectors
    # (the hints are given here, not inside a called function: a hint on a call's result is
    # lost when the call is inlined)
    align: tl.constexpr = 16 if VEC > 1 else 1
    src = tl.load(row + 0).to(tl.uint64, bitcast=True).to(typed.dtype, bitcast=True)
    dst = tl.load(row + 1).to(tl.uint64, bitcast=True).to(typed.dtype, bitcast=True)
    src = tl.multiple_of(src, align)
    dst = tl.multiple_of(dst, align)
    src = dl.translate(src, tl.load(row + 3), ctx)
    dst = dl.translate(dst, tl.load(row + 4), ctx)
    n = tl.multiple_of(tl.load(row + 2), VEC)
    nblocks = tl.cdiv(n, BLOCK)
    block = pid
    while block < nblocks:
        offs = block.to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
        mask = offs < n
        v = tl.load(src + offs, mask=mask)
        if REDUCE:
            v = (v.to(ACC) + tl.load(dst + offs, mask=mask).to(ACC)).to(v.dtype)
        tl.store(dst + offs, v, mask=mask)
        block += nprog
    sig = tl.load(row + 5)
    if sig != 0:
        tl.debug_barrier()
        done = tl.atomic_add(counters + t, 1, sem="acq_rel", scope="sys")
        if done == nprog - 1:
            tl.atomic_xchg(counters + t, 0, sem="relaxed", scope="sys")
            dl.notify(_as_ptr(sig, sig_typed), value, tl.load(row + 6), ctx)


_FAST_MOVE = FastKernel(_move_kernel)


def _default_programs() -> int:
    return 1 if current().world.backend == "cpu" else 16


@register_engine
class SmEngine(Engine):
    """Load/store (optionally sum) kernel on ``programs`` programs per transfer."""

    name = "sm"
    can_reduce = True

    def __init__(self, programs: int | None = None, block: int | None = None,
                 concurrent: bool = False) -> None:
        if programs is not None:
            programs = check_int(programs, "sm engine: programs", 1)
        if block is not None and (check_int(block, "sm engine: block", 1) & (block - 1)):
            raise ValueError(f"sm engine: block must be a power of two, got {block}")
        self.programs = programs or _default_programs()
        cpu = current().world.backend == "cpu"
        self.block = int(block) if block is not None else (4096 if cpu else 2048)
        self._tables: OrderedDict = OrderedDict()
        #: the tables a CUDA graph captured (read at each replay), by id: never let go
        self._pinned: dict[int, Kept] = {}
        device = self._device = current().world.device
        self._lane = SideLane(device, concurrent)
        # launches on the issuing stream share the tables' counters: an issue on another
        # stream than the previous one first waits for it (a side stream orders its own)
        self._order = StreamOrder(device) if self._lane.side is None else None

    def issue(self, transfers: list[Transfer], since: object | None = None) -> None:
        rt = current()
        groups: dict[tuple, list[Transfer]] = {}
        for i, t in enumerate(transfers):
            try:
                _check(t, rt.world.rank)
            except ValueError as exc:
                raise named(exc, transfers, i) from None
            # an int for the kernel (the check takes any integer: a NumPy one failed there)
            value = int(t.signal.value) if t.signal is not None else 0
            groups.setdefault((t.src.dtype, t.reduce, value), []).append(t)
        tables = [(key, batch, self._table(batch, transfers)) for key, batch in groups.items()]
        if self._order is not None:
            self._order.follow()
        raw = launch_stream(self._lane, self._device)
        if raw is not None:
            self._keep([kept for _, _, (_, _, _, kept) in tables], raw)
        with self._lane.launching(transfers, since):
            self._launch(tables, rt.context())

    def mark(self) -> object | None:
        return self._lane.mark()

    def _keep(self, kept: list[Kept], raw: int) -> None:
        """Note the stream of raw handle ``raw`` that this issue launches on as a reader of
        its tables (``kept``), for when the cache lets them go; while a CUDA graph is
        captured, pin them: a replay reads them, however long after."""
        for k in kept:
            k.used_on(raw, self._lane.side)
        if capturing():
            for k in kept:
                self._pinned[id(k)] = k

    def drain(self) -> None:
        self._lane.drain()

    def _launch(self, tables: list, ctx) -> None:
        for (dtype, reduce, value), batch, (desc, counters, sig_typed, _) in tables:
            vec, acc = _vector(batch), tl_accumulator(carrier(dtype))
            # transfers are grid.y, at most GRID_YZ_MAX a launch (a larger grid fails)
            for first in range(0, len(batch), GRID_YZ_MAX):
                grid = (self.programs, min(GRID_YZ_MAX, len(batch) - first))
                _FAST_MOVE[grid](desc[first * _FIELDS:] if first else desc,
                                 carried(batch[0].src), sig_typed,
                                 counters[first:] if first else counters, value, ctx,
                                 BLOCK=self.block, REDUCE=reduce, VEC=vec, ACC=acc,
                                 num_warps=8)

    @torch.inference_mode(False)  # state kept across calls (runtime/heap.py)
    def _table(self, batch: list[Transfer], transfers: list[Transfer]):
        """The descriptor table, counters, a tensor typed as its signals and the
        :class:`~.streams.Kept` holding the first two, of ``batch`` (one launch group of
        ``transfers``); on a new table, first check that every remote side lies in a live
        buffer of its peer's heap and that the group's transfers do not race
        (:func:`_check_disjoint`) (a table's addresses, ranks and sizes key it, and the heap,
        with its count of frees, so a cached one was checked in this world's heap when it
        was made and nothing was freed since)."""
        rows = []
        sig_typed = None
        for t in batch:
            sig_addr, sig_rank = 0, 0
            if t.signal is not None:
                sig_typed = t.signal.pad.signals
                sig_addr = sig_typed.data_ptr() + 8 * t.signal.index
                sig_rank = t.dst_rank
            rows.append((t.src.data_ptr(), t.dst.data_ptr(), t.src.numel(), t.src_rank,
                         t.dst_rank, sig_addr, sig_rank))
        heap = current().heap  # an engine may serve several worlds (ditron.use)
        key = (batch[0].src.element_size(), tuple(rows), id(heap), heap.frees)
        entry = self._tables.get(key)
        if entry is None:
            _check_remote(batch, transfers)
            _check_disjoint(rows, batch[0].src.element_size(), batch, transfers)
            # the rows and the zeroed counters in one synchronous copy: a fill kernel queued
            # on the issuing stream ran after a side stream's launch started at an earlier
            # mark (``since``), which then counted from whatever the memory held
            table = torch.tensor([v for r in rows for v in r] + [0] * len(rows),
                                 dtype=torch.int64, device=current().world.device)
            entry = (table[: len(rows) * _FIELDS], table[len(rows) * _FIELDS:], Kept(table))
            self._tables[key] = entry
            if len(self._tables) > _CACHE_LIMIT:
                # dropped here; its Kept holds the memory until the launches reading it
                # on other streams than its allocation stream have passed
                self._tables.popitem(last=False)
        else:
            self._tables.move_to_end(key)
        return entry[0], entry[1], sig_typed if sig_typed is not None else entry[1], entry[2]


def _vector(batch: list[Transfer]) -> int:
    """Elements per 16-byte vector if every transfer of ``batch`` starts 16-byte aligned on
    both sides and moves whole vectors, else 1."""
    vec = max(16 // batch[0].src.element_size(), 1)
    for t in batch:
        if t.src.data_ptr() % 16 or t.dst.data_ptr() % 16 or t.src.numel() % vec:
            return 1
    return vec


def _check(t: Transfer, rank: int) -> None:
    check_transfer(t, rank, "sm engine", contiguous=True, on_device=True)
    if t.reduce:
        check_summed("sm engine", t.src.dtype)
    else:
        check_moved("sm engine", t.src.dtype)


def _check_remote(batch: list[Transfer], transfers: list[Transfer]) -> None:
    """Raise ``ValueError`` (naming the transfer's place in ``transfers``) unless the remote
    side of every non-empty transfer of ``batch`` (a launch group of ``transfers``) and the
    signal pad of every signalled one lie inside live symmetric buffers (the kernel
    translates them without a check)."""
    rt = current()
    me = rt.world.rank
    for k, t in enumerate(batch):
        try:
            if t.signal is not None:
                signal_slot(t, "sm engine")
            if t.src.numel():
                endpoints(t, me, "sm engine")
        except ValueError as exc:
            raise named(exc, transfers, _places(batch, transfers)[k]) from None


def _places(batch: list[Transfer], transfers: list[Transfer]) -> list[int]:
    """Where each transfer of ``batch`` (a launch group: a subsequence of ``transfers``)
    stands in ``transfers`` (by identity: a transfer given twice has two places)."""
    places = []
    for i, u in enumerate(transfers):
        if len(places) < len(batch) and u is batch[len(places)]:
            places.append(i)
    return places


def _check_disjoint(rows: list[tuple], size: int, batch: list[Transfer],
                    transfers: list[Transfer]) -> None:
    """Raise ``ValueError`` where a transfer of ``batch`` (one launch: its ``rows``, elements
    of ``size`` bytes) writes memory that another one reads or writes: their programs run
    at once. A side is its rank's bytes as this process addresses them (a remote side by
    its view in the own heap, as the kernel translates it); one transfer's ``src`` and
    ``dst`` may be the same tensor (``check_transfer`` refused other overlaps of them)."""
    spans = []  # (rank, lo, hi, writes, transfer)
    for j, (src, dst, n, src_rank, dst_rank, _, _) in enumerate(rows):
        if n:
            spans.append((dst_rank, dst, dst + n * size, True, j))
            if (src_rank, src) != (dst_rank, dst):
                spans.append((src_rank, src, src + n * size, False, j))
    spans.sort()
    rank = None
    for r, lo, hi, writes, j in spans:  # sweep: the furthest end so far, of any, of writes
        if r != rank:
            rank, reach, reach_w = r, (lo, j), (lo, j)
        other = reach[1] if writes and reach[0] > lo else (
            reach_w[1] if reach_w[0] > lo else None)
        if other is not None:
            places = _places(batch, transfers)
            first, second = sorted((places[other], places[j]))
            raise ValueError(
                f"sm engine: transfers {first} and {second} of a batch of {len(transfers)} "
                f"overlap in memory on rank {r} (one writes what the other reads or writes); "
                f"the sm engine moves them at once, in any order: issue them in separate "
                f"batches (or use copy_engine, which moves a batch in order)")
        if hi > reach[0]:
            reach = (hi, j)
        if writes and hi > reach_w[0]:
            reach_w = (hi, j)
