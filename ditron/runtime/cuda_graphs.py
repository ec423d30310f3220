"""CUDA-graph capture state: whether this thread captures a graph, the block in which
graph-safe variants run eagerly (:func:`graph_safe`), and capturing calls into a graph.

A graph-safe variant keeps no per-call state on the host: its epochs are counted on the
device (``signals.py``: ``SignalPad.device_epoch``), and its workspaces and pads are made by
an eager warm-up inside :func:`graph_safe` (collectively) before ``torch.cuda.graph``.
"""

from __future__ import annotations

import contextlib

import torch

from . import stream_memops
from .world import current, is_initialized

#: :func:`graph_safe` blocks this process is inside (they hold for every world of it)
_safe_blocks = 0


def capturing() -> bool:
    """Whether this thread's current CUDA stream is capturing a graph. Never asks CUDA in a
    process where torch has not initialised it (nothing can capture there): the CPU
    backend's ranks, forked on a host with GPUs, may not touch the CUDA runtime."""
    return torch.cuda.is_initialized() and torch.cuda.is_current_stream_capturing()


def capture_id() -> int | None:
    """The id of the CUDA-graph capture this thread's current stream is in (unique per
    capture in the process), ``None`` when it captures none."""
    if not capturing():
        return None
    return stream_memops.capture_id(torch._C._cuda_getCurrentRawStream(
        torch.cuda.current_device()))


@contextlib.contextmanager
def graph_safe():
    """Inside this block the ops run their CUDA-graph-safe variants eagerly (what they run
    while a graph is captured): the warm-up call that allocates their workspaces before
    ``torch.cuda.graph``. It holds in every world of the process, as a capture does (ops
    that run in another world inside it, through ``ditron.use`` or ``ditron.nn``'s
    ``world``, warm up too). Collective use: every rank enters it around the same calls."""
    global _safe_blocks
    _safe_blocks += 1
    try:
        yield
    finally:
        _safe_blocks -= 1


def graph_mode() -> bool:
    """Whether a call takes the graph-safe variants (capturing, or inside
    :func:`graph_safe`)."""
    return capturing() or _safe_blocks > 0


def collectives_capturable() -> bool:
    """Whether torch.distributed collectives on the world's device group can be captured in
    a CUDA graph (NCCL; not gloo, the group of ranks that share a GPU). Capturing one that
    cannot invalidates the capture, and the failed capture's memory pool then aborts the
    process at exit (torch 2.11)."""
    return is_initialized() and current().groups.device_backend == "nccl"


def capture(fn, calls: int, safe_warm_up: bool = True) -> torch.cuda.CUDAGraph:
    """A CUDA graph of ``calls`` calls of ``fn``, after one eager warm-up call (inside
    :func:`graph_safe` with ``safe_warm_up``: workspaces, pads and compilation are made
    there; every rank must make it, the allocations are collective). ``RuntimeError``
    before the warm-up in a world of the CPU backend (every rank of it raises)."""
    if is_initialized() and current().world.backend != "cuda":
        raise RuntimeError(f"ditron capture: CUDA graphs need the cuda backend; this world "
                           f"runs on {current().world.backend!r}")
    with graph_safe() if safe_warm_up else contextlib.nullcontext():
        fn()
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(calls):
            fn()
    return graph


__all__ = ["capture", "capture_id", "capturing", "collectives_capturable", "graph_mode",
           "graph_safe"]
