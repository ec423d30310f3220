"""Distributed swizzle: the order in which a persistent GEMM visits its output tiles.

A tile is ``(mb, nb)``: row block ``mb`` and column block ``nb``; its id is
``mb * n_blocks + nb``. Row blocks belong to *segments* (the rows of one rank: a shard of
the gathered A in AG-GEMM, the rows destined to one rank in GEMM-RS). The functions here
return an int32 tensor of tile ids, the order the kernel follows; programs take the ids
``order[pid], order[pid + P], ...`` so the global order is kept across programs.

* ``gather_order`` (AG-GEMM): start with the row blocks of the own rank (their rows need no
  transfer), then follow the arrival order of the remote chunks (``rank+1, rank+2, ...`` or
  a plan's order).
* ``scatter_order`` (GEMM-RS / GEMM-AR): tiles destined to the next rank first, then the
  one after, own rows last, so the partials travel while the rest is computed and the own
  tiles (which reduce what arrived) come when the peers' partials are in.

Inside each segment, tiles follow a grouped order (``group_m`` row blocks per column sweep)
for L2 reuse, as a plain single-GPU GEMM would.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch


def grouped(mbs: Sequence[int], n_blocks: int, group_m: int) -> list[int]:
    """Tile ids of the row blocks ``mbs`` (in this order) in grouped order.

    Equivalent to visiting ``group_m`` consecutive row blocks for every column block before
    moving to the next group of row blocks.
    """
    out: list[int] = []
    group_m = max(1, group_m)
    for g in range(0, len(mbs), group_m):
        rows = mbs[g : g + group_m]
        for nb in range(n_blocks):
            out.extend(mb * n_blocks + nb for mb in rows)
    return out


def linear_order(m_blocks: int, n_blocks: int, group_m: int = 8) -> torch.Tensor:
    """The plain single-GPU order (grouped), as an int32 tensor."""
    return torch.tensor(grouped(range(m_blocks), n_blocks, group_m), dtype=torch.int32,
                        device="cpu")


def _segment_blocks(seg_of_block: Sequence[int], segments: Sequence[int]) -> list[int]:
    """Row blocks in the order of ``segments`` (``seg_of_block[mb]``: the segment of row
    block ``mb``, as the caller places it)."""
    order: list[int] = []
    for s in segments:
        order.extend(mb for mb, seg in enumerate(seg_of_block) if seg == s)
    return order


def _segmented(seg_of_block: Sequence[int], n_blocks: int, segments: Sequence[int],
               group_m: int) -> torch.Tensor:
    """Tile ids of the blocks of ``segments``, one segment after another, each in grouped
    order, as an int32 tensor."""
    tiles: list[int] = []
    for s in segments:
        tiles += grouped(_segment_blocks(seg_of_block, [s]), n_blocks, group_m)
    return torch.tensor(tiles, dtype=torch.int32, device="cpu")


def _check_segments(op: str, seg_of_block: Sequence[int], rank: int,
                    world_size: int) -> None:
    """Raise ``ValueError`` unless ``rank`` is in ``[0, world_size)`` and every block's
    segment is a rank or ``-1`` (a block of no rows, left out of the order): a block of
    another segment, or of a rank the order starts past, would be left out silently."""
    if not 0 <= rank < world_size:
        raise ValueError(f"{op}: rank must lie in [0, {world_size}), got {rank}")
    bad = sorted({s for s in seg_of_block if not -1 <= s < world_size})
    if bad:
        raise ValueError(f"{op}: row blocks must belong to a segment in [0, {world_size}) or "
                         f"-1 (no rows), got {bad}")


def gather_order(seg_of_block: Sequence[int], n_blocks: int, rank: int, world_size: int,
                 arrival: Sequence[int] | None = None, group_m: int = 8) -> torch.Tensor:
    """AG-GEMM order: own segment first, then segments in ``arrival`` order, grouped within
    each segment (a group never mixes segments: every own tile precedes every peer tile,
    so no own tile waits behind a peer's chunk).

    ``seg_of_block[mb]`` is the segment row block ``mb`` is placed with (a block that
    straddles two shards goes with the one that arrives later, since it waits for both:
    ``plan.deps.consumer_waits(..., rank).owner``; ``-1``: a block of no rows, left out).
    ``arrival`` (distinct ranks) defaults to ``rank+1, rank+2, ...`` (mod ``world_size``);
    ranks it leaves out follow in that default order, so every block is visited once.
    """
    _check_segments("gather_order", seg_of_block, rank, world_size)
    default = [(rank + i) % world_size for i in range(1, world_size)]
    arrival = default if arrival is None else list(arrival)
    if len(set(arrival)) != len(arrival) or not all(0 <= s < world_size for s in arrival):
        raise ValueError(f"gather_order: arrival must name distinct ranks in [0, "
                         f"{world_size}), got {arrival}")
    segs = [rank] + [s for s in arrival if s != rank]
    segs += [s for s in default if s not in segs]
    return _segmented(seg_of_block, n_blocks, segs, group_m)


def scatter_order(seg_of_block: Sequence[int], n_blocks: int, rank: int, world_size: int,
                  group_m: int = 8) -> torch.Tensor:
    """GEMM-RS order: tiles for ``rank+1`` first, then ``rank+2``, ..., own tiles last,
    grouped within each segment: every peer tile precedes every own tile, so a program
    never waits (own tiles wait for the peers' partials) with peer tiles still to do.
    Blocks of segment ``-1`` (no rows) are left out."""
    _check_segments("scatter_order", seg_of_block, rank, world_size)
    segs = [(rank + i) % world_size for i in range(1, world_size)] + [rank]
    return _segmented(seg_of_block, n_blocks, segs, group_m)


def allreduce_order(seg_of_block: Sequence[int], n_blocks: int, rank: int, world_size: int,
                    group_m: int = 8) -> torch.Tensor:
    """GEMM-AR order: the scatter order (reduce-scatter phase, then the own tiles, whose
    reduced results are broadcast as soon as each is done)."""
    return scatter_order(seg_of_block, n_blocks, rank, world_size, group_m)
