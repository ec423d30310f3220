"""Edges of worlds over process groups (``docs/groups.md``) that ``test_groups.py`` leaves
out: four worlds in each process (the job, pairs, the middle ranks ``{1, 2}`` with
``{0, 3}``, a world of one rank) used in a rotating interleaved order with the same shapes
in each, every collective and overlapped GEMM against torch.distributed on the same ranks;
and a world object of another process refused by ``ditron.use``.
"""

from __future__ import annotations

import pytest
import torch
import torch.distributed as dist

import ditron

from ..ops.poison import poison_empty


def _reference(parts: list[list[int]]):
    """This rank's group of ``parts`` made by plain torch.distributed (every job rank makes
    every group)."""
    made = [dist.new_group(p, backend="gloo") for p in parts]
    return next(g for p, g in zip(parts, made, strict=True) if dist.get_rank() in p)


def _summed(x: torch.Tensor, group) -> torch.Tensor:
    y = x.clone()
    dist.all_reduce(y, group=group)
    return y


def _gathered(x: torch.Tensor, group, dim: int = 0) -> torch.Tensor:
    parts = [torch.empty_like(x) for _ in range(dist.get_world_size(group))]
    dist.all_gather(parts, x.contiguous(), group=group)
    return torch.cat(parts, dim)


def _close(got: torch.Tensor, ref: torch.Tensor, what: str) -> None:
    torch.testing.assert_close(got, ref, rtol=1e-4, atol=1e-4, msg=what)


def _ops(w, ref, g: torch.Generator, call: int, what: str) -> int:
    """Every collective and overlapped GEMM of world ``w`` against torch on ``ref``, on
    shapes that divide into no tile; returns how many results were checked."""
    W, r = w.world_size, w.rank
    y = torch.randn(6 * W, 5, generator=g)
    s = _summed(y, ref)
    for method in ("one_shot", "two_shot", "auto"):
        _close(ditron.ops.all_reduce(y, method=method), s, f"{what}: all_reduce {method}")
    _close(ditron.ops.reduce_scatter(y), s[6 * r:6 * r + 6], f"{what}: reduce_scatter")
    x = torch.randn(3, 7, generator=g)
    assert torch.equal(ditron.ops.all_gather(x), _gathered(x, ref)), f"{what}: all_gather"
    assert torch.equal(ditron.ops.all_gather(x, dim=1), _gathered(x, ref, 1)), \
        f"{what}: all_gather dim=1"
    sizes = [(3 * r + j + call) % 4 for j in range(W)]  # uneven, some 0
    every = _gathered(torch.tensor([sizes]), ref)
    recv = [int(every[j, r]) for j in range(W)]
    z = torch.randn(sum(sizes), 5, generator=g)
    expected = torch.empty(sum(recv), 5)
    dist.all_to_all_single(expected, z, recv, sizes, group=ref)
    assert torch.equal(ditron.ops.all_to_all(z, sizes, recv), expected), f"{what}: all_to_all"
    for method in ("overlap", "auto"):
        a = torch.randn(9, 20, generator=g)
        b = torch.randn(17, 20, generator=g).t()  # a transposed weight
        _close(ditron.ops.ag_gemm(a, b, method=method), _gathered(a, ref) @ b,
               f"{what}: ag_gemm {method}")
        a2 = torch.randn(7 * W, 10, generator=g)
        part = _summed(a2 @ b[:10], ref)
        _close(ditron.ops.gemm_rs(a2, b[:10], method=method), part[7 * r:7 * r + 7],
               f"{what}: gemm_rs {method}")
        _close(ditron.ops.gemm_ar(a2, b[:10], method=method), part, f"{what}: gemm_ar {method}")
    return 11


def _interleaved_worlds(calls: int) -> int:
    poison_empty()
    me = dist.get_rank()
    job = ditron.world()
    job_ref = _reference([[0, 1, 2, 3]])
    pair_ref = _reference([[0, 1], [2, 3]])
    middle_ref = _reference([[1, 2], [0, 3]])
    pair = ditron.init(group=[me - me % 2, me - me % 2 + 1])
    middle = ditron.init(group=[2, 1] if me in (1, 2) else [3, 0])  # any order: sorted
    solo = ditron.init(group=[me])
    assert middle.global_ranks == ((1, 2) if me in (1, 2) else (0, 3))
    assert middle.rank == middle.global_ranks.index(me) and ditron.world() == solo
    assert (solo.world_size, solo.rank, solo.global_ranks) == (1, 0, (me,))
    worlds = [(job, job_ref, "job"), (pair, pair_ref, "pair"), (middle, middle_ref, "middle"),
              (solo, None, "solo")]
    g = torch.Generator().manual_seed(70 + me)
    checks = 0
    for call in range(calls):  # a rotating order: each world follows each other one
        for w, ref, name in worlds[call % 4:] + worlds[:call % 4]:
            with ditron.use(w):
                if ref is None:
                    y = torch.randn(5, 3, generator=g)
                    assert torch.equal(ditron.ops.all_reduce(y), y)
                    assert torch.equal(ditron.ops.all_gather(y), y)
                    continue
                checks += _ops(w, ref, g, call, f"{name} world, call {call}")
    # symmetric tensors stay with their world; another world's is an ordinary tensor there
    with ditron.use(pair):
        theirs = ditron.zeros(8)
    with ditron.use(middle):
        mine = ditron.zeros(8)
        mine.fill_(me)
        ditron.barrier()
        other = 1 - middle.rank
        assert float(ditron.peer(mine, other)[0]) == middle.global_ranks[other]
        with pytest.raises(ValueError):
            ditron.peer(theirs, 0)
        with pytest.raises(ValueError):
            ditron.free(theirs)
        theirs.copy_(torch.arange(8.0) * (me + 1))
        _close(ditron.ops.all_reduce(theirs), _summed(theirs.clone(), middle_ref),
               "another world's symmetric tensor as an input")
    # a world of another process (its World sent over): not this process's to use
    seen = [None] * 4
    dist.all_gather_object(seen, middle)
    stranger = seen[(me + 1) % 4]
    if stranger.global_ranks != middle.global_ranks:
        with pytest.raises(ValueError, match="not a world of this process"):
            with ditron.use(stranger):
                pass
    return checks


def test_interleaved_worlds_match_torch():
    """Worlds whose rank in this process differs (global rank 1: 1 of the job and of its
    pair, 0 of the middle world) and whose ops use the same shapes, so caches, workspaces
    and signal epochs kept per world would meet if they were shared."""
    assert ditron.launch(_interleaved_worlds, 4, 3, backend="cpu") == [3 * 3 * 11] * 4


_DIFFERENT = r"members of a new world are making different worlds"
