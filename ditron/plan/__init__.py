"""Chunk plans, the middle end: what moves between ranks, and what each GEMM tile waits for.

- ``ir``: a :class:`Plan` of :class:`Chunk` s (row ranges, one signal slot each) and per-rank
  :class:`Transfer` s (push or pull, point-to-point or collective, with dependencies),
  checked when built (chunks cover the rows once, no dependency cycle, copies from a rank
  holding the chunk) and immutable after; :func:`split`
  refines the chunks, :func:`check` refuses dependencies on later transfers, ``print(plan)``
  shows it.
- ``templates``: the common plans (all-gather in rank or swizzled order, two-level
  all-gather across nodes, reduce-scatter, all-reduce, ring).
- ``deps``: from a plan and a GEMM's row tiling (:class:`TileMapping`), the chunks each row
  block waits for (:func:`consumer_waits`) or completes (:func:`producer_chunks`),
  straddling blocks included.
- ``lowering``: a plan's transfers handed to the transfer engines, the colocated publish of
  chunk signals, and the network stage between nodes.
"""

from . import deps, ir, lowering, templates
from .deps import TileDeps, TileMapping, consumer_waits, producer_chunks
from .ir import Chunk, Plan, Transfer, check, split

__all__ = [
    "Chunk", "Plan", "TileDeps", "TileMapping", "Transfer", "check", "consumer_waits", "deps",
    "ir", "lowering", "producer_chunks", "split", "templates",
]
