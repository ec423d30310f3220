"""The task level: Triton tile functions registered as tasks, run as one megakernel.

Build a :class:`TaskGraph` on every rank (``graph.add(name, tile_fn, *args, tiles=...,
reads=..., writes=...)``), ``graph.compile()`` it, and call the result: each call is one
persistent launch per rank whose programs take the graph's tiles from a queue, in program
order, and wait only for the tiles (of any rank) whose regions they depend on. See
``docs/megakernel.md``.
"""

from .graph import CTX, Schedule, Task, TaskGraph, derive
from .megakernel import Megakernel, compile_graph
from .region import Region, region

__all__ = ["CTX", "Megakernel", "Region", "Schedule", "Task", "TaskGraph", "compile_graph",
           "derive", "region"]
