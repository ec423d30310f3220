"""Tuned decisions: what the tuner chose, keyed by op, shape, dtype, world size and device.

The ops read decisions here (``method="auto"``); ``tuner.py`` measures and writes them.
"""

from __future__ import annotations

import dataclasses

import torch

from ..kernels.gemm import GemmConfig
from . import cache


@dataclasses.dataclass(frozen=True)
class Decision:
    """What the tuner chose for one (op, shape, dtype, world size, device): for eager calls,
    and in ``graph`` (when the tuner could time CUDA graphs) for calls captured in a graph,
    whose variants and costs differ (no host time; device-counted epochs)."""

    method: str  # "overlap" | "fallback"
    config: GemmConfig = GemmConfig()
    engine: str = "colocated"
    time_us: float = 0.0
    #: rows per chunk, or each chunk's rows of a GEMM-RS segment (None: the op's default)
    chunk_rows: int | tuple[int, ...] | None = None
    early_rows: int = 0  # own rows in the last peer's GEMM (GEMM-RS by the copy engine)
    graph: Decision | None = None  # the choice under CUDA graphs (its own ``graph``: None)

    def gemm_config(self) -> GemmConfig:
        return self.config

    @classmethod
    def from_json(cls, entry: dict) -> Decision:
        graph = entry.get("graph")
        chunks = entry.get("chunk_rows")
        return cls(entry["method"], GemmConfig(**entry["config"]), entry["engine"],
                   entry["time_us"], tuple(chunks) if isinstance(chunks, list) else chunks,
                   entry.get("early_rows", 0), cls.from_json(graph) if graph else None)


def _device_name() -> str:
    from ..runtime.world import current

    dev = current().world.device
    return torch.cuda.get_device_name(dev) if dev.type == "cuda" else "cpu"


def key_for(op: str, M: int, N: int, K: int, dtype: torch.dtype, world_size: int) -> str:
    return cache.make_key(op, (M, N, K), str(dtype).replace("torch.", ""), world_size,
                          _device_name())


def lookup(op: str, M: int, N: int, K: int, dtype: torch.dtype,
           world_size: int) -> Decision | None:
    """The cached decision for this op and shape on this device, if tuned."""
    entry = cache.get(key_for(op, M, N, K, dtype, world_size))
    if entry is None:
        return None
    try:
        return Decision.from_json(entry)
    except (KeyError, TypeError, ValueError):  # written by an older version: tune again
        return None
