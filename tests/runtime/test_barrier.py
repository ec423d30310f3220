"""``ditron.barrier`` over several (simulated) nodes, beside a peer in another call."""

from __future__ import annotations

import pytest
import torch

import ditron


def _barrier_beside_an_allocation() -> str:
    """The ranks of node 0 enter a barrier while those of node 1 allocate: each node's
    device barrier passes, then the nodes meet on the host. That was a plain gloo barrier,
    which the peers' allocation gather does not match: every rank hung (until the host
    timeout, 10 minutes at least). On the host rows every rank raises, naming each rank's
    call, and all stay usable."""
    w = ditron.world()
    ditron.barrier()  # the barrier's pad, made together
    if w.node == 0:
        with pytest.raises(RuntimeError) as info:
            ditron.barrier()
    else:
        with pytest.raises(ValueError) as info:
            ditron.empty(4, torch.float32)
    t = ditron.zeros(4, torch.float32)  # in step again
    ditron.barrier()
    ditron.peer(t, w.node * 2 + (w.local_rank + 1) % 2).fill_(w.rank + 1)
    ditron.barrier()
    assert t.tolist() == [float(w.node * 2 + (w.local_rank + 1) % 2 + 1)] * 4
    return str(info.value)


def test_barrier_beside_another_call_raises_on_every_node(monkeypatch):
    monkeypatch.setenv("DITRON_LOCAL_WORLD_SIZE", "2")
    monkeypatch.setenv("DITRON_LAUNCH_TIMEOUT", "120")  # the hang ends the old code sooner
    results = ditron.launch(_barrier_beside_an_allocation, 4, backend="cpu")
    calls = ("  rank 0: ditron.barrier\n  rank 1: ditron.barrier\n  rank 2: ditron.empty")
    for r in (0, 1):
        assert results[r].startswith("ditron.barrier: ranks are in different collective "
                                     "calls (a barrier on some, another call on others):\n"
                                     + calls), results[r]
    for r in (2, 3):
        assert results[r].startswith("ditron.empty") and calls in results[r], results[r]
