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
