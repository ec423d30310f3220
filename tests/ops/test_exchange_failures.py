"""The exchanges on a full heap: a new signal pad evicts the cached workspaces, and a call
that fails to allocate leaves the exchange usable (it took no epoch)."""

from __future__ import annotations

import pytest
import torch

import ditron
from ditron import ops
from ditron.runtime.heap import HeapExhausted
from ditron.runtime.world import current


def _fill_heap() -> torch.Tensor:
    """One symmetric buffer over every free block's bytes (the largest block, if the heap
    is fragmented, is what matters: nothing new fits after it)."""
    heap = current().heap
    return ditron.empty((max(size for _, size in heap._free),), torch.uint8)


def _graph_safe_gather_on_full_heap() -> list[float]:
    ops.all_gather(torch.ones(2000))  # a cached inbox of 2 x 16 KiB, free to evict
    filler = _fill_heap()  # noqa: F841
    with ops.graph_safe():  # its first call makes the graph-safe pad (exchange.graph_pad)
        got = ops.all_gather(torch.ones(4), engine="copy_engine")
    return got.tolist()


def test_graph_safe_pad_on_full_heap_evicts(monkeypatch):
    monkeypatch.setenv("DITRON_HEAP_SIZE", "64K")
    assert ditron.launch(_graph_safe_gather_on_full_heap, 2) == [[1.0] * 8] * 2


def _graph_safe_gather_after_failed_calls() -> list[float]:
    with ops.graph_safe():
        ops.all_gather(torch.ones(4), engine="copy_engine")
        for _ in range(3):
            with pytest.raises(HeapExhausted):  # a 2 x 64 KiB inbox on a 64 KiB heap
                ops.all_gather(torch.ones(5000), engine="copy_engine")
        got = ops.all_gather(torch.ones(4), engine="copy_engine")
    return got.tolist()


def test_failed_graph_safe_calls_leave_exchange_usable(monkeypatch):
    monkeypatch.setenv("DITRON_HEAP_SIZE", "64K")
    monkeypatch.setenv("DITRON_WAIT_TIMEOUT", "5")
    assert ditron.launch(_graph_safe_gather_after_failed_calls, 2) == [[1.0] * 8] * 2


def _chunked_gather_after_failed_calls() -> list[float]:
    ops.all_gather(torch.ones(4), engine="copy_engine")
    for _ in range(3):
        with pytest.raises(HeapExhausted):
            ops.all_gather(torch.ones(5000), engine="copy_engine")
    return ops.all_gather(torch.ones(4), engine="copy_engine").tolist()


def test_failed_chunked_calls_leave_exchange_usable(monkeypatch):
    monkeypatch.setenv("DITRON_HEAP_SIZE", "64K")
    monkeypatch.setenv("DITRON_WAIT_TIMEOUT", "5")
    assert ditron.launch(_chunked_gather_after_failed_calls, 2) == [[1.0] * 8] * 2
