"""CUDA-graph capture for the benchmarks: one graph of several calls of an op."""

from __future__ import annotations

import contextlib

import torch


def capture(fn, calls: int, graph_safe: bool = True) -> torch.cuda.CUDAGraph:
    """A CUDA graph of ``calls`` calls of ``fn``, after one eager warm-up call (inside
    ``ditron.ops.graph_safe()`` when ``graph_safe``: workspaces, pads and compilation are
    made there; every rank must make it, the allocations are collective)."""
    import ditron

    with ditron.ops.graph_safe() if graph_safe else contextlib.nullcontext():
        fn()
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(calls):
            fn()
    return graph
