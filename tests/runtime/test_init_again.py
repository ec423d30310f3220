"""``ditron.init`` called again for a world that exists: the settings it was made with are
accepted again, other ones refused."""

from __future__ import annotations

import pytest

import ditron


def _again_across_nodes() -> tuple[int, bool, str]:
    w = ditron.world()
    again = ditron.init(group=list(w.global_ranks), local_world_size=2)
    with pytest.raises(RuntimeError) as info:
        ditron.init(group=list(w.global_ranks), local_world_size=1)
    return w.local_world_size, again is w, str(info.value)


def test_a_group_world_across_nodes_takes_its_own_settings_again(monkeypatch):
    """``local_world_size`` is the job's ranks per node; a world over ranks 0 and 2 of
    nodes of two has one of its ranks per node. Calling ``init`` again with the keyword
    the world was made with was refused ("asked for local_world_size=2 (the world has
    1)"), since the check compared it with the world's own count."""
    monkeypatch.setenv("DITRON_LOCAL_WORLD_SIZE", "2")
    got = ditron.launch(_again_across_nodes, 4, backend="cpu", groups=[[0, 2], [1, 3]])
    for per_node, same, refused in got:
        assert per_node == 1 and same
        assert "asked for local_world_size=1 (the world has 2)" in refused, refused


def _group_worlds_again(rendezvous: str) -> list[bool]:
    """Under the caller's process group, worlds over ranks [0, 1] made, used and shut down
    three times (rank 2 stays out), then the whole job's twice."""
    import torch
    import torch.distributed as dist

    rank, size = ditron.world().global_ranks[ditron.world().rank], ditron.world().world_size
    ditron.shutdown()  # launch made a world of the whole job (and its process group)
    dist.init_process_group("gloo", init_method=rendezvous, rank=rank, world_size=size)
    ok = []
    try:
        for group in ([0, 1],) * 3 + (None,) * 2:
            if group is not None and rank not in group:
                continue
            w = ditron.init("cpu", group=group)
            x = torch.randn(5, generator=torch.Generator().manual_seed(10 * len(ok) + rank))
            parts = [torch.empty_like(x) for _ in range(w.world_size)]
            dist.all_gather(parts, x, group=ditron.runtime.world.current().host_group)
            ok.append(torch.equal(ditron.ops.all_gather(x), torch.cat(parts)))
            ditron.shutdown()
    finally:
        dist.destroy_process_group()
    return ok


def test_group_worlds_are_made_again_under_the_callers_process_group(tmp_path):
    """``init(group=...)`` after a ``shutdown`` of a world over the same ranks, under a
    process group the caller made: the groups made again took the destroyed ones' names
    (torch names them by their ranks) and met at their stale store keys ("Connection
    refused", or a hang); the world's groups are now kept and reused."""
    got = ditron.launch(_group_worlds_again, 3, f"file://{tmp_path / 'pg'}", backend="cpu")
    assert got == [[True] * 5, [True] * 5, [True] * 2]
