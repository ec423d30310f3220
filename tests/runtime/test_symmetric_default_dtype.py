"""``ditron.empty`` / ``ditron.zeros`` without a dtype follow ``torch.get_default_dtype()``
as ``torch.empty`` does, and ranks whose defaults differ are refused on every rank."""

from __future__ import annotations

import pytest
import torch

import ditron


def _default_dtypes(dtypes: list[torch.dtype]) -> list[str]:
    w = ditron.world()
    torch.set_default_dtype(torch.float64)
    made = []
    try:
        a, b = ditron.empty((3, 5)), ditron.zeros(7)
        assert (a.dtype, b.dtype) == (torch.empty(1).dtype, torch.zeros(1).dtype)
        assert bool((b == 0).all())
        data = torch.randn(w.world_size, 3, 5, generator=torch.Generator().manual_seed(3))
        a.copy_(data[w.rank])  # float64 values travel whole
        ditron.barrier()
        for r in range(w.world_size):
            assert torch.equal(ditron.peer(a, r), data[r])
        made += [str(a.dtype), str(b.dtype)]
        ditron.barrier()
        torch.set_default_dtype(dtypes[w.rank])  # the ranks' defaults differ
        with pytest.raises(ValueError) as info:
            ditron.zeros(4)
        made.append(str(info.value))
    finally:
        torch.set_default_dtype(torch.float32)
    return made


@pytest.mark.parametrize("world_size", [1, 3])
def test_default_dtype_follows_torch(world_size, backend):
    """Both used float32 whatever torch's default dtype was."""
    dtypes = [torch.float64, torch.bfloat16, torch.float64][:world_size]
    if world_size == 1:  # nothing to disagree with: the allocation goes through
        got = ditron.launch(_default_dtypes_alone, 1, backend=backend)
        assert got == [["torch.float64", "torch.float64", "torch.bfloat16"]], got
        return
    got = ditron.launch(_default_dtypes, world_size, dtypes, backend=backend)
    for made in got:
        assert made[:2] == ["torch.float64", "torch.float64"], made
        assert "ranks disagree" in made[2] and "rank 1: shape=(4,), dtype='torch.bfloat16'" \
            in made[2], made[2]


def _default_dtypes_alone() -> list[str]:
    torch.set_default_dtype(torch.float64)
    try:
        made = [str(ditron.empty(2).dtype), str(ditron.zeros((2, 2)).dtype)]
        torch.set_default_dtype(torch.bfloat16)
        made.append(str(ditron.zeros(3).dtype))
    finally:
        torch.set_default_dtype(torch.float32)
    return made
