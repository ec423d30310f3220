"""Host API of the symmetric heap: ``empty``, ``zeros``, ``free``, ``peer``, ``context``."""

from __future__ import annotations

from collections.abc import Sequence

import torch

from ..language.context import DeviceContext
from .world import current


def empty(shape: int | Sequence[int], dtype: torch.dtype | None = None, *,
          name: str | None = None) -> torch.Tensor:
    """Allocate an uninitialised symmetric tensor (collective).

    Every rank must call it with the same ``shape`` and ``dtype`` in the same order; the
    buffer then sits at the same heap offset on every rank, so kernels reach a peer's copy
    with ``ditron.language`` primitives and the host with :func:`peer`. ``dtype`` defaults,
    as ``torch.empty``'s, to ``torch.get_default_dtype()`` (each rank's own: ranks whose
    defaults differ disagree). ``name`` labels the buffer in diagnostics and must be the
    same on every rank too. Raises ``ValueError`` if ranks disagree and ``RuntimeError`` if
    the heap is exhausted on any rank.
    """
    if dtype is None:
        dtype = torch.get_default_dtype()
    return current().heap.alloc(shape, dtype, name)


def zeros(shape: int | Sequence[int], dtype: torch.dtype | None = None, *,
          name: str | None = None) -> torch.Tensor:
    """Like :func:`empty`, filled with zeros (collective; not a barrier: pair with
    ``ditron.barrier()`` before peers may write into it)."""
    t = empty(shape, dtype, name=name)
    t.zero_()
    return t


def free(tensor: torch.Tensor) -> None:
    """Return a symmetric tensor's block to the heap (every rank frees the same blocks)."""
    current().heap.free(tensor)


def peer(t: torch.Tensor, rank: int) -> torch.Tensor:
    """Host view of ``rank``'s copy of the symmetric tensor ``t`` (same node only).

    Reads and writes through the view touch the peer's memory directly; order them with
    ``ditron.barrier()``.
    """
    return current().heap.peer(t, rank)


def is_symmetric(tensor: torch.Tensor) -> bool:
    """True if ``tensor`` lies in this rank's symmetric heap, inside a live buffer (a
    buffer's tensors stop being symmetric when it is freed, as :func:`peer` refuses them)."""
    return current().heap.contains(tensor)


def heap_rank(tensor: torch.Tensor) -> int | None:
    """The rank whose symmetric heap (as this process maps it) holds ``tensor``: this rank
    for a symmetric tensor, ``q`` for a :func:`peer` view of rank ``q``'s copy, else
    ``None``."""
    return current().heap.mapped_rank(tensor)


def context() -> DeviceContext:
    """The device context to pass to kernels that use ``ditron.language`` primitives."""
    return current().context()
