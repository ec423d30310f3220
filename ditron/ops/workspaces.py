"""The ops' symmetric workspaces: one cache, one release, eviction when the heap is full.

Every op keeps the symmetric buffers it reuses across calls in ``current().cache`` under a
``("workspace", ...)`` key, through :func:`cached`. A workspace is any object with
``release(heap)`` (frees its buffers) and ``pad_key`` (the name of a signal pad to drop with
it, or ``None``), and optionally ``in_use`` (true while the caller still holds its buffers
or signals between calls: an open ``all_to_all_inbox`` ``Inbox``; such a workspace is not
freed); :class:`Buffers` is the plain one. Host-side metadata (plans, tile orders)
is cached elsewhere and never holds heap tensors, so it outlives an eviction.

Allocation is collective and every rank allocates the same buffers in the same order, so a
heap that is full is full on every rank at the same call (:class:`HeapExhausted` is raised on
all of them). :func:`allocate` then frees every cached workspace not in use (collective:
:func:`release_workspaces`) and tries once more, so a long run over many shapes (a
benchmark, a tuner) keeps working with a bounded heap; only the op that needs more than the
whole heap fails, with the heap's message.

Signal pads that an op outgrew (``runtime.signals.signal_pad`` replaces a pad asked for more
slots by a larger one) stay allocated while workspaces, CUDA graphs or a peer's earlier call
may still use them, and are freed with the workspaces: by :func:`release_workspaces`, after
its barrier and once the graphs and workspaces that point into them are gone. Without that
an op whose shapes keep growing would scatter them over the heap until a workspace no
longer fits in any free block, with the heap mostly free.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import TypeVar

import torch

from ..runtime.heap import HeapExhausted
from ..runtime.stream_order import StreamOrder
from ..runtime.world import current

T = TypeVar("T")


@dataclasses.dataclass
class Buffers:
    """Symmetric tensors freed together."""

    tensors: tuple[torch.Tensor, ...]
    pad_key: str | None = None

    def release(self, heap) -> None:
        for t in self.tensors:
            heap.free(t)


def _is_workspace(key) -> bool:
    return isinstance(key, tuple) and len(key) > 0 and key[0] == "workspace"


def release_workspaces() -> None:
    """Free every cached workspace and drop its signal pad, then free the pads that
    ``signal_pad`` replaced (collective: a barrier first, so no peer still uses them; then
    the replayed graphs go, which point into both; the next call of an op allocates afresh,
    its device epochs restarting with fresh pads). CUDA graphs that a user captured on the
    ops point into the same buffers and pads: they must not be replayed afterwards.

    A workspace ``in_use`` on any rank (an open ``Inbox`` of ``all_to_all_inbox``, whose
    rows the caller still reads and whose ``close()`` signals into its pad) is kept, with
    its pad, on every rank (the ranks share which in one host gather), so the heap stays
    symmetric and the inbox valid; its ops go on with it."""
    from ..runtime.agreement import gather
    from ..runtime.barrier import barrier
    from ..runtime.signals import drop_signal_pad, free_retired_pads
    from .replays import release as release_replays

    rt = current()
    barrier()
    release_replays()  # their graphs point into the workspaces
    keys = [k for k in rt.cache if _is_workspace(k)]
    busy = tuple(k for k in keys if getattr(rt.cache[k], "in_use", False))
    kept = {k for (every,) in gather("ditron.ops.release_workspaces", in_use=busy)
            for k in every}
    for key in [k for k in keys if k not in kept]:
        ws = rt.cache.pop(key)
        ws.release(rt.heap)
        if ws.pad_key is not None:
            drop_signal_pad(ws.pad_key)
    free_retired_pads()  # same order on every rank: they were retired collectively


def allocate(build: Callable[[], T]) -> T:
    """``build()`` (collective heap allocations); if the heap is exhausted, free every cached
    workspace not in use and every retired signal pad (:func:`release_workspaces`) and
    build once more (collective either way)."""
    from ..runtime.signals import retired_pads

    try:
        return build()
    except HeapExhausted:
        if not retired_pads() and not any(_is_workspace(k) for k in current().cache):
            raise
        release_workspaces()
        rt = current()
        rt.cache["workspaces:evictions"] = evictions() + 1
        return build()


def evictions() -> int:
    """How many times this process freed every workspace to make room (a heap that is too
    small for the working set shows here as a count that keeps growing)."""
    return current().cache.get("workspaces:evictions", 0)


def cached(key: tuple, build: Callable[[], T]) -> T:
    """The workspace cached under ``("workspace", *key)``, built (collectively) when missing."""
    rt = current()
    full = ("workspace", *key)
    ws = rt.cache.get(full)
    if ws is None:
        ws = allocate(build)
        rt.cache[full] = ws
    return ws


def follow_previous_use(name: str, device: torch.device) -> None:
    """Order this call's use of the workspace ``name`` (its device epochs, its buffers)
    after the previous one on this rank (``runtime/stream_order.py``: a call on another
    CUDA stream first waits for that one; nothing on the CPU backend or while capturing).
    The order outlives the workspace, so a workspace built again after
    :func:`release_workspaces` follows the last use of the one it replaces."""
    rt = current()
    order = rt.cache.get(("stream_order", name))
    if order is None:
        order = rt.cache[("stream_order", name)] = StreamOrder(device)
    order.follow()


def drop(key: tuple) -> None:
    """Free the workspace cached under ``("workspace", *key)``, if any, and drop its signal
    pad, as :func:`release_workspaces` does (collective; nobody may still use either: a
    workspace built again under the key gets a fresh zeroed pad, so its epochs restart)."""
    from ..runtime.signals import drop_signal_pad

    rt = current()
    ws = rt.cache.pop(("workspace", *key), None)
    if ws is not None:
        ws.release(rt.heap)
        if ws.pad_key is not None:
            drop_signal_pad(ws.pad_key)


def alloc_buffers(specs: list[tuple[tuple[int, ...], torch.dtype, str]],
                  pad_key: str | None = None) -> Buffers:
    """Allocate ``(shape, dtype, name)`` symmetric buffers in order; if one fails, those
    already made are freed before the error propagates."""
    heap = current().heap
    made: list[torch.Tensor] = []
    try:
        for shape, dtype, name in specs:
            made.append(heap.alloc(shape, dtype, name))
    except BaseException:
        for t in made:
            heap.free(t)
        raise
    return Buffers(tuple(made), pad_key)


__all__ = ["Buffers", "alloc_buffers", "allocate", "cached", "drop", "evictions",
           "release_workspaces"]
