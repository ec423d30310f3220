"""CUDA-graph mode of the ops: whether a call must take its graph-safe variant.

A call is in graph mode while this thread's current stream captures a CUDA graph, and inside
:func:`graph_safe`, where the graph-safe variants run eagerly: the warm-up that allocates
their workspaces and pads (collectively) before ``torch.cuda.graph``. Graph-safe variants
keep no per-call state on the host: their epochs are counted on the device
(``runtime/signals.py``: ``SignalPad.device_epoch``).
"""

from __future__ import annotations

import contextlib

import torch

from ..runtime import stream_memops
from ..runtime.world import current, is_initialized

_GRAPH_SAFE = "ops:graph_safe"


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
    ``torch.cuda.graph``. Collective use: every rank enters it around the same calls."""
    rt = current()
    rt.cache[_GRAPH_SAFE] = rt.cache.get(_GRAPH_SAFE, 0) + 1
    try:
        yield
    finally:
        rt.cache[_GRAPH_SAFE] -= 1


def collectives_capturable() -> bool:
    """Whether torch.distributed collectives on the world's device group can be captured in
    a CUDA graph (NCCL; not gloo, the group of ranks that share a GPU). Capturing one that cannot
    invalidates the capture, and the failed capture's memory pool then aborts the process
    at exit (torch 2.11)."""
    return is_initialized() and current().groups.device_backend == "nccl"


def capture(fn, calls: int, safe_warm_up: bool = True) -> torch.cuda.CUDAGraph:
    """A CUDA graph of ``calls`` calls of ``fn``, after one eager warm-up call (inside
    :func:`graph_safe` with ``safe_warm_up``: workspaces, pads and compilation are made
    there; every rank must make it, the allocations are collective)."""
    with graph_safe() if safe_warm_up else contextlib.nullcontext():
        fn()
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(calls):
            fn()
    return graph


def graph_mode() -> bool:
    """Whether this call takes the graph-safe variants (capturing, or inside
    :func:`graph_safe`)."""
    return capturing() or current().cache.get(_GRAPH_SAFE, 0) > 0


def require_warm(op: str, pad_key: str, *cache_keys) -> None:
    """While capturing, raise unless a warm-up made the graph-safe variant's pad ``pad_key``
    (with its device epoch) and the runtime-cache entries ``cache_keys``: none can be made in
    a capture (they are allocated collectively)."""
    if not capturing():
        return
    rt = current()
    pad = rt.cache.get(("signal_pad", pad_key))
    if pad is None or not pad.has_device_epoch or any(k not in rt.cache for k in cache_keys):
        raise not_warmed(op)


def not_warmed(op: str) -> RuntimeError:
    """The error for a capture whose graph-safe workspace no warm-up made."""
    return RuntimeError(f"{op}: no graph-safe workspace for this shape, dtype and "
                        f"configuration yet; run the op once inside `with "
                        f"ditron.ops.graph_safe():` before capturing the CUDA graph")


__all__ = ["capture", "capture_id", "capturing", "collectives_capturable", "graph_mode",
           "graph_safe", "not_warmed", "require_warm"]
