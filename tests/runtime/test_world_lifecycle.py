"""A launched rank that shuts its worlds down and makes new ones: ``ditron.init`` again
after ``ditron.shutdown`` (over the whole job or a group), inside ``ditron.use`` blocks
too, and what the tensors of a world that was shut down are afterwards."""

from __future__ import annotations

import os
import pickle
import signal

import pytest
import torch
import torch.distributed as dist

import ditron
from ditron.runtime import world as world_mod

from ..ops.poison import poison_empty


def _summed(x: torch.Tensor, group=None) -> torch.Tensor:
    y = x.clone()
    dist.all_reduce(y, group=group)
    return y


def _close(got: torch.Tensor, ref: torch.Tensor, what: str) -> None:
    torch.testing.assert_close(got, ref, rtol=1e-5, atol=1e-5, msg=what)


def _cycles(parts: list[list[int]]) -> int:
    """Three shutdown / init cycles: the whole job, the group of ``parts`` holding this
    rank, the whole job again; each world's ops and symmetric tensors checked."""
    poison_empty()
    me = dist.get_rank()
    g = torch.Generator().manual_seed(300 + me)
    old = ditron.zeros(6)
    old_world = ditron.world()
    checks = 0
    for cycle, grouped in enumerate([False, True, False]):
        ditron.shutdown()
        with pytest.raises(ValueError, match="not a world of this process"):
            with ditron.use(old_world):
                pass
        mine = next(p for p in parts if me in p) if grouped else None
        w = ditron.init("cpu", group=mine)
        ref = None
        if grouped:  # every job rank makes every group, as torch.distributed asks
            made = [dist.new_group(p, backend="gloo") for p in parts]
            ref = made[parts.index(mine)]
            assert w.global_ranks == tuple(mine)
        x = torch.randn(5, 3, generator=g)
        _close(ditron.ops.all_reduce(x), _summed(x, ref), f"all_reduce, cycle {cycle}")
        sym = ditron.zeros(6)
        sym.fill_(me + 10 * cycle)
        ditron.barrier()
        for r in range(w.world_size):
            assert float(ditron.peer(sym, r)[0]) == w.global_ranks[r] + 10 * cycle
        # a symmetric tensor of the world shut down: still readable memory, an ordinary
        # tensor to the new world's ops, and refused where a symmetric one is needed
        old.copy_(torch.randn(6, generator=g))
        _close(ditron.ops.all_reduce(old), _summed(old, ref), f"old tensor, cycle {cycle}")
        with pytest.raises(ValueError, match="not in the symmetric heap"):
            ditron.peer(old, 0)
        with pytest.raises(ValueError, match="not in the symmetric heap"):
            ditron.free(old)
        old, old_world = sym, w
        checks += 1
    return checks


def test_init_and_shutdown_again_in_launched_ranks(monkeypatch):
    """Each ``init`` after a ``shutdown`` in a launched rank makes a new process group over
    the launch's file rendezvous. torch's file store serves one group: the second met the
    first's file (its keys, or its removal by the last rank to leave it) and waited
    forever, often on the first cycle."""
    monkeypatch.setenv("DITRON_LAUNCH_TIMEOUT", "90")  # the old hang fails in bounded time
    assert ditron.launch(_cycles, 3, [[0, 2], [1]], backend="cpu") == [3] * 3


def _init_again_inside_use() -> tuple[bool, bool, bool]:
    """``shutdown`` then ``init`` inside ``ditron.use(w)``: the new world stays current
    after the block, and ``init`` then returns it rather than making another."""
    w = ditron.world()
    with ditron.use(w):
        ditron.shutdown()
        made = ditron.init("cpu")
        rt = world_mod.current()
    after = ditron.is_initialized() and ditron.world() == made
    again = ditron.init() == made and world_mod.current() is rt
    with ditron.use(made):
        ditron.shutdown()
    left = ditron.is_initialized()
    ditron.init("cpu")
    x = torch.randn(4, generator=torch.Generator().manual_seed(dist.get_rank()))
    _close(ditron.ops.all_reduce(x), _summed(x), "all_reduce after the blocks")
    return after, again, left


def test_init_again_inside_use_stays_current(monkeypatch):
    """Leaving the ``use`` block made no world current although the block had made one, so
    ``ditron.world()`` raised and the next ``init`` mapped a second heap over the same
    ranks (the first one leaked)."""
    monkeypatch.setenv("DITRON_LAUNCH_TIMEOUT", "90")
    got = ditron.launch(_init_again_inside_use, 2, backend="cpu")
    assert got == [(True, True, False)] * 2, got


def _forked_child() -> list[str]:
    """What a child forked from an initialised rank gets from ditron, and the parent's
    world working on afterwards."""
    parent = ditron.world()
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: report, then leave without running any cleanup
        os.close(read)
        signal.alarm(20)  # a collective over the parent's connections may never return
        seen = [ditron.world() == parent]  # to read, as a data loader's worker may
        for call in (ditron.init, lambda: ditron.zeros(4), ditron.context):
            try:
                seen.append(f"returned {call()}")
            except RuntimeError as exc:
                seen.append(str(exc))
        os.write(write, pickle.dumps(seen))
        os._exit(0)
    os.close(write)
    with os.fdopen(read, "rb") as f:
        seen = pickle.loads(f.read())
    os.waitpid(pid, 0)
    x = torch.randn(5, generator=torch.Generator().manual_seed(dist.get_rank()))
    _close(ditron.ops.all_reduce(x), _summed(x), "all_reduce after the fork")
    return seen


def test_a_forked_child_does_not_inherit_the_world(backend, monkeypatch):
    """A child forked from an initialised rank got its parent's world from ``ditron.init``
    and used it: the parent's process group (its connections) and heap, which its
    collectives would have shared with the parent. It may still read ``ditron.world()``."""
    if backend != "cpu":
        pytest.skip("CUDA cannot be forked")
    monkeypatch.setenv("DITRON_LAUNCH_TIMEOUT", "90")
    got = ditron.launch(_forked_child, 2, backend=backend)
    for seen in got:
        assert seen[0] is True, seen
        assert seen[1].startswith("ditron.init: this process was forked from process "), seen
        assert "the process group it inherited is the parent's" in seen[1], seen
        for message in seen[2:]:
            assert message.startswith("ditron is not initialised in this process (it was "
                                      "forked from process "), seen
