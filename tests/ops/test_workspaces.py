"""Cached workspaces: a full heap evicts them (collectively) instead of failing the op."""

from __future__ import annotations

import pytest
import torch
import torch.distributed as dist

import ditron
from ditron.ops import workspaces
from ditron.runtime.heap import HeapExhausted
from ditron.runtime.world import current


def _reference_sum(x: torch.Tensor) -> torch.Tensor:
    y = x.detach().cpu().clone()
    dist.all_reduce(y, group=current().host_group)
    return y


def _rank_many_shapes() -> tuple[int, int]:
    """With a heap that holds only a few workspaces, ops over many sizes keep working (older
    workspaces are evicted), results stay exact, and an op that needs more than the whole
    heap still fails with the heap's error on every rank."""
    me = ditron.world().rank
    dev = ditron.world().device
    heap = current().heap
    peak = 0
    for i, n in enumerate([20_000, 30_000, 50_000, 70_000, 20_000, 90_000]):
        g = torch.Generator().manual_seed(100 * me + i)
        x = torch.randn(n, generator=g).to(dev)
        for engine in ("sm", "copy_engine"):
            ref = _reference_sum(x)
            y = ditron.ops.all_reduce(x, "one_shot", engine=engine)
            torch.testing.assert_close(y.cpu(), ref, rtol=1e-5, atol=1e-5,
                                       msg=f"size {n} {engine}")
        peak = max(peak, heap.used_bytes)
    assert peak <= heap.size
    too_big = torch.zeros(heap.size // 4 + 1, device=dev)  # one-shot inbox: 2 x W x n x 4 B
    with pytest.raises(HeapExhausted, match="symmetric heap exhausted"):
        ditron.ops.all_reduce(too_big, "one_shot", engine="copy_engine")
    # the heap is still usable afterwards
    x = torch.ones(1000, device=dev)
    assert torch.equal(ditron.ops.all_reduce(x, "one_shot", engine="sm").cpu(),
                       torch.full((1000,), float(ditron.world().world_size)))
    return workspaces.evictions(), int(peak > 0)


@pytest.mark.parametrize("world_size", [2, 3])
def test_full_heap_evicts_cached_workspaces(world_size, monkeypatch):
    monkeypatch.setenv("DITRON_HEAP_SIZE", "6M")
    results = ditron.launch(_rank_many_shapes, world_size)
    assert len({r for r in results}) == 1, results  # every rank evicted at the same calls
    assert results[0][0] >= 1, "no eviction happened: the heap was not small enough"
