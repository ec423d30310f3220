"""Chunk-to-tile dependencies: which chunk signals a GEMM tile waits for or completes.

The GEMM's row tiling is a :class:`TileMapping`: row block ``mb`` covers rows
``[row0, row_end)``; blocks restart at every segment of ``seg_rows`` rows (``seg_rows == M``:
plain tiling, where a block may straddle two chunks). A tile reads (consumer) or writes
(producer) the rows of its row block, whatever its column block, so dependencies are per
row block: two int32 tensors ``lo[mb]``, ``hi[mb]`` giving the inclusive range of chunk ids
(chunks are numbered in row order) it touches; ``lo > hi`` means no chunk (no wait). A
consumer waits for every chunk of its range: a chunk of zero rows between two that it
reads is in the range too, so its signal must be raised as well (``lowering`` does).
"""

from __future__ import annotations

import dataclasses

import torch

from ..runtime.integers import as_int
from .ir import Plan, chunks_covering


@dataclasses.dataclass(frozen=True)
class TileMapping:
    M: int
    block_m: int
    seg_rows: int = 0  # 0: one segment of M rows

    def __post_init__(self):
        M, block_m, seg_rows = (as_int(v) for v in (self.M, self.block_m, self.seg_rows))
        if M is None or block_m is None or seg_rows is None or M < 0 or block_m < 1 \
                or seg_rows < 0:
            raise ValueError(f"TileMapping needs ints M >= 0, block_m >= 1 and seg_rows >= 0, "
                             f"got M={self.M!r}, block_m={self.block_m!r}, "
                             f"seg_rows={self.seg_rows!r}")
        for name, value in (("M", M), ("block_m", block_m), ("seg_rows", seg_rows)):
            object.__setattr__(self, name, value)  # plain ints (a NumPy int keys apart)

    @property
    def segment(self) -> int:
        return self.seg_rows if self.seg_rows > 0 else max(self.M, 1)

    @property
    def blocks_per_seg(self) -> int:
        return -(-self.segment // self.block_m)

    @property
    def num_segments(self) -> int:
        return -(-self.M // self.segment) if self.M > 0 else 0

    @property
    def m_blocks(self) -> int:
        return self.num_segments * self.blocks_per_seg

    def rows(self, mb: int) -> tuple[int, int]:
        """Rows ``[row0, row_end)`` of row block ``mb`` (empty past the end of M)."""
        seg, blk = divmod(mb, self.blocks_per_seg)
        seg_start = seg * self.segment
        row0 = seg_start + blk * self.block_m
        row_end = min(row0 + self.block_m, seg_start + self.segment, self.M)
        return row0, max(row0, row_end)


@dataclasses.dataclass(frozen=True)
class TileDeps:
    """Per row block: the chunk range ``[lo, hi]`` and the segment (owner) it belongs to."""

    lo: torch.Tensor
    hi: torch.Tensor
    owner: list[int]

    def to(self, device) -> TileDeps:
        return TileDeps(self.lo.to(device), self.hi.to(device), self.owner)

    def waits(self, mb: int) -> list[int]:
        return list(range(int(self.lo[mb]), int(self.hi[mb]) + 1))


def consumer_waits(plan: Plan, mapping: TileMapping, rank: int | None = None) -> TileDeps:
    """Chunks each row block reads. With ``rank``, chunks already on ``rank`` (owned by it)
    at the ends of the range are dropped: those tiles need no wait for them (one in the
    middle, for a block spanning three shards, stays). ``owner[mb]`` is the block's place
    in the gather order: without ``rank`` the owner of the last chunk it reads (in row
    order, ``-1`` for a block of no rows); with ``rank`` the owner of the chunks it reads
    that land last on ``rank`` (``plan.arrival_order(rank)``, its own chunks first; a tie,
    e.g. shards that never land there, goes to the last in row order), so a block
    straddling two shards is computed once both are there. ``ValueError`` for arguments of
    other types, a ``rank`` that is not an int rank of the plan, or a mapping of other rows."""
    if not isinstance(plan, Plan) or not isinstance(mapping, TileMapping):
        raise ValueError(f"consumer_waits takes a Plan and a TileMapping, got "
                         f"{type(plan).__name__} and {type(mapping).__name__}")
    if mapping.M != plan.rows:
        raise ValueError(f"the tile mapping covers {mapping.M} rows, the plan {plan.name} "
                         f"{plan.rows}: they must tile the same tensor")
    if rank is not None:  # 1.5 or True would drop no chunk, or rank 1's, silently
        number = as_int(rank)
        if number is None or not 0 <= number < plan.world_size:
            raise ValueError(f"rank {rank!r} is not a rank of the plan's {plan.world_size} "
                             f"(an int in [0, {plan.world_size}))")
        rank = number
    check_row_order(plan)
    landing = {} if rank is None else {rank: -1} | {
        q: i for i, q in enumerate(plan.arrival_order(rank))}
    lo, hi, owner = [], [], []
    for mb in range(mapping.m_blocks):
        start, stop = mapping.rows(mb)
        ids = [c.id for c in chunks_covering(plan, start, stop)]
        owners = [plan.chunks[c].owner for c in ids]
        last_owner = owners[-1] if ids else -1
        if rank is not None and ids:  # a shard that never lands on rank counts as last
            last_owner = max(reversed(owners), key=lambda q: landing.get(q, len(landing)))
        if rank is not None:
            while ids and plan.chunks[ids[0]].owner == rank:
                ids.pop(0)
            while ids and plan.chunks[ids[-1]].owner == rank:
                ids.pop()
        lo.append(ids[0] if ids else 0)
        hi.append(ids[-1] if ids else -1)
        owner.append(last_owner)
    return TileDeps(torch.tensor(lo, dtype=torch.int32, device="cpu"),
                    torch.tensor(hi, dtype=torch.int32, device="cpu"), owner)


def check_row_order(plan: Plan) -> None:
    """Raise ``ValueError`` unless the plan's chunks, in id order, tile its rows ``[0,
    rows)`` one after another (chunks of zero rows included): a row block's ``[lo, hi]``
    names the chunks between by id, and rows in no chunk would be read with no wait."""
    row = 0
    for c in plan.chunks:
        if c.start != row:
            raise ValueError(f"plan {plan.name}: chunk {c.id} starts at row {c.start}, not "
                             f"{row}: waits are derived for chunks that tile the rows [0, "
                             f"{plan.rows}) in id order")
        row = c.stop
    if row != plan.rows:
        raise ValueError(f"plan {plan.name}: its chunks end at row {row}, not {plan.rows}: "
                         f"waits are derived for chunks that tile the rows [0, {plan.rows}) "
                         f"in id order")


def producer_chunks(plan: Plan, mapping: TileMapping) -> tuple[TileDeps, torch.Tensor]:
    """Chunks each row block writes, and for every chunk the number of row blocks writing
    it (a counter signal of chunk ``c`` is complete at ``epoch * count[c] * column_blocks``
    when each tile adds 1)."""
    deps = consumer_waits(plan, mapping)
    count = torch.zeros(plan.num_chunks, dtype=torch.int32, device="cpu")
    for mb in range(mapping.m_blocks):
        for c in range(int(deps.lo[mb]), int(deps.hi[mb]) + 1):
            count[c] += 1
    return deps, count
