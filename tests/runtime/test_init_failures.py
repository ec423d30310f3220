"""``ditron.init`` failing on one rank: every rank raises, naming the rank and its error,
none waits for it, and the world is left uninitialised, so that ``init`` can be retried."""

from __future__ import annotations

import pytest
import torch
import torch.distributed as dist

import ditron
from ditron.runtime import world as world_mod
from ditron.runtime.backends import cpu

_SHM_FULL = "RuntimeError: /dev/shm is full (simulated)"


def _break_mapping(step: str) -> None:
    """This rank's heap mapping fails from now on, at ``step``: ``"room"`` (its own
    segment: no room in /dev/shm, before the ranks' first meeting), ``"peer"`` (mapping
    rank 0's segment, between the meetings) or ``"runtime"`` (once mapped: its bases
    refused by the world's runtime)."""
    if step == "runtime":
        world_mod.HEAP_BASE_ALIGN = 1 << 40
    elif step == "room":
        def no_room(*args) -> None:
            raise RuntimeError("/dev/shm is full (simulated)")

        cpu._check_room = no_room
    else:
        real = torch.from_file

        def no_peer(path, *args, **kw):
            if path.endswith("-0"):
                raise RuntimeError("mmap failed (simulated)")
            return real(path, *args, **kw)

        torch.from_file = no_peer


def _init_fails_on(failing: int, step: str, caller_group: str | None) -> tuple[str, list]:
    """In a launched rank: a new world (its process group made by ``init``, or by the
    caller at ``caller_group``) whose heap mapping fails on rank ``failing``; then
    ``init`` again, which works. Returns what ``init`` raised and the retry's all-gather."""
    rank, size = ditron.world().rank, ditron.world().world_size
    ditron.shutdown()
    if caller_group is not None:
        dist.init_process_group("gloo", init_method=caller_group, rank=rank, world_size=size)
    real = (cpu._check_room, torch.from_file, world_mod.HEAP_BASE_ALIGN)
    if rank == failing:
        _break_mapping(step)
    try:
        with pytest.raises(RuntimeError) as info:
            ditron.init()
    finally:
        cpu._check_room, torch.from_file, world_mod.HEAP_BASE_ALIGN = real
    assert not ditron.is_initialized()
    assert dist.is_initialized() == (caller_group is not None)  # init's own group is gone
    ditron.init()
    x = ditron.zeros(3, torch.float32) + rank
    gathered = ditron.ops.all_gather(x).tolist()
    if caller_group is not None:
        ditron.shutdown()
        dist.destroy_process_group()
    return str(info.value), gathered


@pytest.mark.parametrize("step", ["room", "peer", "runtime"])
@pytest.mark.parametrize("owner", ["init", "caller"])
def test_a_heap_that_fails_to_map_on_one_rank_fails_init_on_every_rank(
        step, owner, tmp_path, monkeypatch):
    """Rank 1's mapping failed (no room in /dev/shm, an mmap error): with the process
    group ``init`` made, its peers raised gloo's "Connection reset by peer" (rank 1
    destroyed the group under them); with the caller's group, rank 1 raised and went
    on, and its peers waited in the mapping's barrier until the group's timeout. A rank
    whose runtime refused the mapped heap raised alone, leaving it mapped, and its peers
    went on with a world without it."""
    monkeypatch.setenv("DITRON_LAUNCH_TIMEOUT", "60")
    caller = f"file://{tmp_path / 'group'}" if owner == "caller" else None
    got = ditron.launch(_init_fails_on, 3, 1, step, caller, backend="cpu")
    cause, what = {
        "room": (_SHM_FULL, "creating the symmetric heaps"),
        "peer": ("RuntimeError: ditron: rank 1 cannot map rank 0's heap", "mapping the peers'"),
        "runtime": ("RuntimeError: ditron: symmetric heap bases", "making the world's runtime"),
    }[step]
    for r, (message, gathered) in enumerate(got):
        assert gathered == [float(i) for i in range(3) for _ in range(3)]
        if r == 1:
            assert message.startswith(cause.split(": ", 1)[1]), message
        else:
            assert message.startswith(f"ditron.init: {what}"), message
            assert f"failed on a rank (raised there too):\n  rank 1: {cause}" in message, message
        assert "simulated" in message or step == "runtime"


def _init_with_env_on(failing: int, env: dict[str, str], caller_group: str | None,
                      group: list[int] | None = None) -> tuple[str, list] | None:
    """In a launched rank: a new world over ``group`` (all ranks: ``None``; its process
    group made by ``init``, or by the caller at ``caller_group``) for which rank
    ``failing`` has the variables ``env``; then ``init`` again without them. Returns what
    ``init`` raised (its type and message) and the retry's all-gather (``None`` outside
    ``group``)."""
    rank, size = ditron.world().rank, ditron.world().world_size
    ditron.shutdown()
    if caller_group is not None:
        dist.init_process_group("gloo", init_method=caller_group, rank=rank, world_size=size)
    result = None
    if group is None or rank in group:
        with pytest.MonkeyPatch.context() as mp:
            for name, value in env.items():
                if rank == failing:
                    mp.setenv(name, value)
            with pytest.raises(Exception) as info:  # noqa: PT011 - its type is returned
                ditron.init(group=group)
        assert not ditron.is_initialized()
        ditron.init(group=group)
        gathered = ditron.ops.all_gather(ditron.zeros(2, torch.float32) + rank).tolist()
        result = f"{type(info.value).__name__}: {info.value}", gathered
    if caller_group is not None:
        ditron.shutdown()
        dist.destroy_process_group()
    return result


@pytest.mark.parametrize(("env", "cause"), [
    ({"DITRON_HEAP_SIZE": "lots"}, "SettingsError: DITRON_HEAP_SIZE: cannot read a byte count"),
    ({"DITRON_BACKEND": "cuda"}, "RuntimeError: ditron cuda backend: "),
])
@pytest.mark.parametrize("group", [None, [0, 1]])
def test_a_rank_that_cannot_join_the_callers_group_world_is_named_by_its_peers(
        env, cause, group, tmp_path, monkeypatch):
    """Under the caller's process group (torchrun, ``dist.init_process_group`` first), a
    rank whose own part of ``init`` failed (a setting it cannot read, a backend without
    its device) raised alone, and its peers waited for it in the new world's first host
    gather until the group's timeout."""
    monkeypatch.setenv("DITRON_LAUNCH_TIMEOUT", "60")
    got = ditron.launch(_init_with_env_on, 3, 1, env, f"file://{tmp_path / 'group'}", group,
                        backend="cpu")
    members = group or [0, 1, 2]
    assert [r for r, res in enumerate(got) if res is not None] == members
    for r in members:
        message, gathered = got[r]
        assert gathered == [float(i) for i in members for _ in range(2)]
        if r == 1:
            assert message.startswith(cause), message
        else:
            assert message.startswith("RuntimeError: ditron.init: a rank of the new world "
                                      "could not join it (raised there too):\n  rank 1: "
                                      + cause), message


@pytest.mark.parametrize(("env", "differ", "timeout", "checks"), [
    ({"DITRON_WAIT_TIMEOUT": "0"}, "wait_timeout, check_calls differ", 0.0, False),
    ({"DITRON_CHECK_CALLS": "0"}, "check_calls differs", 120.0, False),
])
@pytest.mark.parametrize("owner", ["init", "caller"])
def test_ranks_with_different_debug_settings_are_refused(owner, env, differ, timeout, checks,
                                                         tmp_path, monkeypatch):
    """A rank without a wait timeout (``DITRON_WAIT_TIMEOUT=0``) among ranks with one made
    a world in which it would wait for ever for a peer whose own wait had given up; one
    checking only new call signatures (``DITRON_CHECK_CALLS=0``, or no timeout: debug mode
    checks every call) skips the host gathers in which its peers wait for it."""
    monkeypatch.setenv("DITRON_LAUNCH_TIMEOUT", "60")
    monkeypatch.setenv("DITRON_WAIT_TIMEOUT", "120")
    monkeypatch.delenv("DITRON_CHECK_CALLS", raising=False)
    caller = f"file://{tmp_path / 'group'}" if owner == "caller" else None
    got = ditron.launch(_init_with_env_on, 2, 1, env, caller, backend="cpu")
    for message, gathered in got:
        assert gathered == [0.0, 0.0, 1.0, 1.0]
        assert message == (f"ValueError: ditron.init: ranks disagree on the call ({differ}):\n"
                           "  rank 0: backend='cpu', heap_size=1073741824, wait_timeout=120.0, "
                           "check_calls=True, local_world_size=2\n"
                           "  rank 1: backend='cpu', heap_size=1073741824, "
                           f"wait_timeout={timeout!r}, check_calls={checks!r}, "
                           "local_world_size=2\n"
                           "(every rank of a world needs the same backend, DITRON_HEAP_SIZE, "
                           "DITRON_WAIT_TIMEOUT and DITRON_CHECK_CALLS or init's keywords, and "
                           "the same ranks per node)"), message
