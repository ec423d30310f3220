"""The exchanges on a full heap: a new signal pad evicts the cached workspaces, and a call
that fails to allocate leaves the exchange usable (it took no epoch)."""

from __future__ import annotations

import contextlib

import pytest
import torch
import torch.distributed as dist

import ditron
from ditron import ops
from ditron.runtime.heap import HeapExhausted
from ditron.runtime.world import current

from .poison import poison_empty


def _fresh(n: int, call: int) -> torch.Tensor:
    """This rank's fresh random ``[n]`` for ``call`` (every rank and call differ: a stale
    or unwritten part of a result cannot equal the reference)."""
    me = ditron.world().rank
    return torch.randn(n, generator=torch.Generator().manual_seed(1000 * call + me))


def _gathered(x: torch.Tensor) -> torch.Tensor:
    """``torch.cat(dist.all_gather(x))`` over the host group."""
    parts = [torch.empty_like(x) for _ in range(ditron.world().world_size)]
    dist.all_gather(parts, x, group=current().host_group)
    return torch.cat(parts)


def _checked_gather(x: torch.Tensor, **kw) -> bool:
    """``ops.all_gather(x, **kw)`` equals torch's bit for bit (fresh outputs NaN)."""
    return torch.equal(ops.all_gather(x, **kw), _gathered(x))


def _fill_heap() -> torch.Tensor:
    """One symmetric buffer over every free block's bytes (the largest block, if the heap
    is fragmented, is what matters: nothing new fits after it)."""
    heap = current().heap
    return ditron.empty((max(size for _, size in heap._free),), torch.uint8)


def _graph_safe_gather_on_full_heap() -> list[bool]:
    poison_empty()
    ok = [_checked_gather(_fresh(2000, 0))]  # a cached inbox of 2 x 16 KiB, free to evict
    filler = _fill_heap()  # noqa: F841
    with ops.graph_safe():  # its first call makes the graph-safe pad (exchange.graph_pad)
        ok += [_checked_gather(_fresh(4, call), engine="copy_engine") for call in (1, 2)]
    return ok


def test_graph_safe_pad_on_full_heap_evicts(monkeypatch):
    monkeypatch.setenv("DITRON_HEAP_SIZE", "64K")
    assert ditron.launch(_graph_safe_gather_on_full_heap, 2) == [[True] * 3] * 2


def _gather_after_failed_calls(graph: bool) -> list[bool]:
    """Gathers of new data on every call, three that fail to allocate in between: the
    calls after them get their own call's data (not the one before's, nor nothing)."""
    poison_empty()
    with ops.graph_safe() if graph else contextlib.nullcontext():
        ok = [_checked_gather(_fresh(4, 0), engine="copy_engine")]
        for _ in range(3):
            with pytest.raises(HeapExhausted):  # a 2 x 64 KiB inbox on a 64 KiB heap
                ops.all_gather(torch.ones(5000), engine="copy_engine")
        ok += [_checked_gather(_fresh(4, call), engine="copy_engine") for call in (1, 2, 3)]
    return ok


@pytest.mark.parametrize("graph", [True, False], ids=["graph_safe", "chunked"])
def test_failed_calls_leave_exchange_usable(monkeypatch, graph):
    monkeypatch.setenv("DITRON_HEAP_SIZE", "64K")
    monkeypatch.setenv("DITRON_WAIT_TIMEOUT", "5")
    assert ditron.launch(_gather_after_failed_calls, 2, graph) == [[True] * 4] * 2
