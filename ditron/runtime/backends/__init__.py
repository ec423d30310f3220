"""Backends: the translation rules of each kind of hardware, chosen once at ``ditron.init``."""

from __future__ import annotations

from .base import Backend, HeapMapping, Topology, meet


def get_backend(name: str) -> Backend:
    if name == "cpu":
        from .cpu import CpuBackend

        return CpuBackend()
    if name == "cuda":
        from .cuda import CudaBackend

        return CudaBackend()
    raise ValueError(f"unknown backend {name!r}; choose 'cpu' or 'cuda'")


__all__ = ["Backend", "HeapMapping", "Topology", "get_backend", "meet"]
