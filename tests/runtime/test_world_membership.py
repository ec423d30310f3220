"""Members of a new world that make different worlds (other group lists, or shared worlds
in other orders): refused on every rank before any group is made, under ``ditron.launch``
and torchrun; and the process groups kept for worlds (``groups._KEPT``) released with the
job's default group, so that ranks started by torchrun exit cleanly.
"""

from __future__ import annotations

import datetime
import gc
import weakref

import pytest
import torch
import torch.distributed as dist

import ditron

from .torchrun_job import run_under_torchrun

_DIFFERENT = r"members of a new world are making different worlds"


def _summed(x: torch.Tensor, group) -> torch.Tensor:
    y = x.clone()
    dist.all_reduce(y, group=group)
    return y


def _reference(parts: list[list[int]]):
    """This rank's group of ``parts`` made by plain torch.distributed (every rank makes
    every group)."""
    made = [dist.new_group(p, backend="gloo") for p in parts]
    return next(g for p, g in zip(parts, made, strict=True) if dist.get_rank() in p)


def _disagreeing_members(rendezvous: str, again: str) -> list[str]:
    """Ranks 0, 1, 2 of a process group made here (gloo, a 30 s timeout): other group
    lists, then the same two groups made in other orders, each refused on every rank at
    once; worlds made right after each refusal; then a member that makes another world
    instead (under a 3 s timeout) named by the rank left waiting."""
    rank, size = dist.get_rank(), dist.get_world_size()
    ditron.shutdown()  # launch made a world of the whole job (and its process group)
    dist.init_process_group("gloo", init_method=rendezvous, rank=rank, world_size=size,
                            timeout=datetime.timedelta(seconds=30))
    seen = []
    try:
        ref = _reference([[0, 1, 2]])
        pair_ref = _reference([[0, 1], [2]])
        lists = {0: [0, 1], 1: [0, 1, 2], 2: [2, 0, 1]}[rank]
        with pytest.raises(ValueError, match=_DIFFERENT + r"[^\n]*\n  global rank 0 makes "
                                             r"the world of ranks \[0, 1\]\n  global rank 1 "
                                             r"makes the world of ranks \[0, 1, 2\]") as exc:
            ditron.init("cpu", group=lists)
        seen.append(str(exc.value))
        assert not ditron.is_initialized()
        orders = {0: [[0, 1], [0, 1, 2]], 1: [[0, 1, 2], [0, 1]], 2: [[0, 1, 2]]}[rank]
        with pytest.raises(ValueError, match=_DIFFERENT):
            ditron.init("cpu", group=orders[0])
        # after each refusal the ranks make worlds again, in one order
        x = torch.randn(4, 3, generator=torch.Generator().manual_seed(rank))
        whole = ditron.init("cpu", group=[0, 1, 2])
        torch.testing.assert_close(ditron.ops.all_reduce(x), _summed(x, ref))
        if rank < 2:
            assert ditron.init("cpu", group=[0, 1]).global_ranks == (0, 1)
            torch.testing.assert_close(ditron.ops.all_reduce(x), _summed(x, pair_ref))
        with ditron.use(whole):
            torch.testing.assert_close(ditron.ops.reduce_scatter(torch.cat([x] * 3)),
                                       _summed(x, ref))
        ditron.shutdown()
        dist.destroy_process_group()
        dist.init_process_group("gloo", init_method=again, rank=rank, world_size=size,
                                timeout=datetime.timedelta(seconds=3))
        if rank == 0:  # rank 1 makes a world without it
            with pytest.raises(RuntimeError, match=r"global ranks \[1\] did not start making "
                                                   r"the world of ranks \[0, 1\] within 3 s"):
                ditron.init("cpu", group=[0, 1])
        else:
            assert ditron.init("cpu", group=[1, 2]).global_ranks == (1, 2)
        return seen
    finally:
        ditron.shutdown()
        dist.destroy_process_group()


def test_members_making_different_worlds_are_refused(tmp_path, monkeypatch):
    """Each used to wait: rank 0 in ``torch.distributed.new_group`` past every timeout
    (the launch's ended it), its peers in gloo until the process group's timeout."""
    monkeypatch.setenv("DITRON_LAUNCH_TIMEOUT", "90")
    got = ditron.launch(_disagreeing_members, 3, f"file://{tmp_path / 'a'}",
                        f"file://{tmp_path / 'b'}", backend="cpu")
    assert all(len(messages) == 1 for messages in got)


def _groups_after_destroy(rendezvous: str) -> list[bool]:
    """Worlds over pairs in a process group made here; after ``shutdown`` and
    ``destroy_process_group``: whether the default group and the pair's groups are alive."""
    rank, size = dist.get_rank(), dist.get_world_size()
    ditron.shutdown()
    dist.init_process_group("gloo", init_method=rendezvous, rank=rank, world_size=size)
    ditron.init("cpu", group=[rank - rank % 2, rank - rank % 2 + 1])
    from ditron.runtime import world as world_mod

    groups = world_mod.current().groups
    held = [weakref.ref(g) for g in (dist.group.WORLD, groups.host, groups.device)]
    x = torch.randn(5, generator=torch.Generator().manual_seed(rank))
    assert ditron.ops.all_reduce(x).shape == x.shape
    del groups
    ditron.shutdown()
    dist.destroy_process_group()
    gc.collect()
    return [r() is not None for r in held]


def test_kept_groups_go_with_the_default_group(tmp_path):
    """Held past ``destroy_process_group`` (by ``_KEPT``'s keys and values), a group kept
    its gloo threads into the interpreter's exit: ranks started by torchrun aborted there
    at random ("terminate called without an active exception")."""
    assert ditron.launch(_groups_after_destroy, 4, f"file://{tmp_path / 'pg'}",
                         backend="cpu") == [[False] * 3] * 4


SCRIPT = """
import datetime
import torch
import torch.distributed as dist
import ditron

dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=20))
rank = dist.get_rank()
ref = dist.new_group([0, 1, 2], backend="gloo")
pair_ref = dist.new_group([0, 1], backend="gloo")
lists = {0: [0, 1], 1: [0, 1, 2], 2: [0, 1, 2]}[rank]
try:
    ditron.init("cpu", group=lists)
except ValueError as exc:
    print(f"rank {rank} refused: {str(exc).splitlines()[0]}", flush=True)
x = torch.randn(6, 4, generator=torch.Generator().manual_seed(rank))
ditron.init("cpu", group=[0, 1, 2])
y = x.clone()
dist.all_reduce(y, group=ref)
torch.testing.assert_close(ditron.ops.all_reduce(x), y)
w = ditron.init("cpu", group=[0, 1] if rank < 2 else [2])
got = ditron.ops.all_gather(x)
if rank < 2:
    parts = [torch.empty_like(x) for _ in range(2)]
    dist.all_gather(parts, x, group=pair_ref)
    assert torch.equal(got, torch.cat(parts))
print(f"rank {rank} world {list(w.global_ranks)} gathered {tuple(got.shape)}", flush=True)
ditron.shutdown()
dist.destroy_process_group()
"""


def test_disagreement_and_group_worlds_under_torchrun(tmp_path):
    """Three ranks started by torchrun make different worlds (refused on each, where they
    waited in new_group or gloo), then a world of the three and a pair, and exit (rc 0:
    no abort at exit)."""
    script = tmp_path / "members.py"
    script.write_text(SCRIPT)
    out = run_under_torchrun(script, 3)
    assert out.returncode == 0, out.stdout + out.stderr
    for rank in range(3):
        assert f"rank {rank} refused: ditron.init: {_DIFFERENT}" in out.stdout, out.stdout
        world = [0, 1] if rank < 2 else [2]
        assert f"rank {rank} world {world} gathered ({6 * len(world)}, 4)" in out.stdout, \
            out.stdout
