"""``runtime.torch_dist``: torch.distributed's single-tensor all-gather and reduce-scatter
under the installed torch's preferred name: right results, and no deprecation warning
(torch 2.13 deprecates ``all_gather_into_tensor`` / ``reduce_scatter_tensor``)."""

from __future__ import annotations

import warnings

import pytest
import torch
import torch.distributed as dist

import ditron
from ditron.runtime.torch_dist import all_gather_single, reduce_scatter_single
from ditron.runtime.world import current


def _case(rows: int) -> int:
    w = ditron.world()
    W, rank = w.world_size, w.rank
    group = current().host_group
    x = torch.randn(W * rows, 5, generator=torch.Generator().manual_seed(7 + rank))
    parts = [torch.empty_like(x) for _ in range(W)]
    dist.all_gather(parts, x, group=group)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        gathered = torch.full((W * W * rows, 5), float("nan"))
        all_gather_single(gathered, x, group=group)
        scattered = torch.full((rows, 5), float("nan"))
        reduce_scatter_single(scattered, x, group=group)
        peak = torch.full((rows, 5), float("nan"))
        reduce_scatter_single(peak, x, dist.ReduceOp.MAX, group=group)
    noisy = [str(c.message) for c in caught
             if issubclass(c.category, (FutureWarning, DeprecationWarning))]
    assert not noisy, noisy
    assert torch.equal(gathered, torch.cat(parts))
    mine = slice(rank * rows, (rank + 1) * rows)
    assert torch.allclose(scattered, torch.stack(parts).sum(0)[mine])
    assert torch.equal(peak, torch.stack(parts).amax(0)[mine])
    return rank


@pytest.mark.parametrize("world_size", [1, 2, 3, 4])
def test_single_tensor_collectives_match_torch(world_size):
    assert ditron.launch(_case, world_size, 3, backend="cpu") == list(range(world_size))
