"""CUDA-graph mode of the ops: the capture state of ``runtime/cuda_graphs.py`` (re-exported:
``ditron.ops.graph_safe`` is public) and the check that a capture finds the graph-safe
variant's workspace made by a warm-up.
"""

from __future__ import annotations

from ..runtime.cuda_graphs import (
    capture,
    capture_id,
    capturing,
    collectives_capturable,
    graph_mode,
    graph_safe,
)
from ..runtime.world import current


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
