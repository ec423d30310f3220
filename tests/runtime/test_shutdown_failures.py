"""A rank whose ``ditron.shutdown`` fails: the error reaches the caller of
``ditron.launch`` with the rank, and its peers raise naming it instead of waiting for it."""

from __future__ import annotations

import os
import time

import pytest

import ditron
from ditron.runtime import launch as launch_mod
from ditron.runtime import world as world_mod


def _fail_on(rank: int, method: str, how: str = "raise") -> None:
    """Rank ``rank``'s backend ``method`` (``synchronize``: as a kernel's asynchronous
    device error surfaces at the next synchronisation; ``unmap_heap``: the heap's
    release) fails from now on: it raises, ends the process (``how="exit"``) or never
    returns (``"hang"``)."""
    if ditron.world().rank != rank:
        return
    rt = world_mod.current()

    def fail(*args) -> None:
        if how == "exit":
            os._exit(3)
        while how == "hang":
            time.sleep(1)
        raise RuntimeError(f"device error on rank {rank} (simulated)")

    rt.backend = type(rt.backend)()  # this world's own: the class's instance stays clean
    setattr(rt.backend, method, fail)


def _returns_then_fails_in_shutdown(how: str = "raise") -> int:
    _fail_on(1, "unmap_heap", how)
    return ditron.world().rank


def test_an_error_in_a_ranks_shutdown_fails_the_launch(backend, monkeypatch):
    """The rank sent its result before shutting down, and the launch returned [0, 1]: the
    error of its shutdown (after the meeting of the ranks: they all returned) went
    nowhere."""
    monkeypatch.setenv("DITRON_LAUNCH_TIMEOUT", "60")
    with pytest.raises(RuntimeError, match="device error on rank 1") as info:
        ditron.launch(_returns_then_fails_in_shutdown, 2, backend=backend)
    assert info.value.rank == 1


def test_a_rank_ending_or_stuck_in_its_shutdown_fails_the_launch(backend, monkeypatch):
    """A rank whose process ended in its shutdown after sending its result, or which never
    finished it (killed after ``_SHUTDOWN_SECONDS``), left a launch that succeeded."""
    with pytest.raises(ditron.RankError, match="rank 1: process exited with code 3 in "
                                               "ditron.shutdown, after fn returned"):
        ditron.launch(_returns_then_fails_in_shutdown, 2, "exit", backend=backend)
    monkeypatch.setattr(launch_mod, "_SHUTDOWN_SECONDS", 3.0)
    start = time.monotonic()
    with pytest.raises(TimeoutError, match=r"ranks \[1\] returned from fn but did not "
                                           r"finish ditron.shutdown within 3 s(.|\n)*rank 1 "
                                           r"was at:(.|\n)*unmap_heap"):
        ditron.launch(_returns_then_fails_in_shutdown, 2, "hang", backend=backend)
    assert time.monotonic() - start < 30


def _shutdown_errors(failing: int) -> str:
    _fail_on(failing, "synchronize")
    try:
        ditron.shutdown()
    except RuntimeError as exc:
        return str(exc)
    finally:
        ditron.init()  # for the launch's own shutdown
    return "shut down"


@pytest.mark.parametrize("world_size", [2, 3])
def test_every_rank_raises_when_one_cannot_shut_down(world_size, backend, monkeypatch):
    """The failing rank skipped the shutdown's meeting of the ranks: its peers waited
    there until the host group's timeout (10 minutes or more)."""
    monkeypatch.setenv("DITRON_LAUNCH_TIMEOUT", "60")
    got = ditron.launch(_shutdown_errors, world_size, 1, backend=backend)
    assert got[1] == "device error on rank 1 (simulated)", got
    for r, message in enumerate(got):
        if r != 1:
            assert message == ("ditron.shutdown: another rank's device failed (its "
                               "synchronisation raised):\n  rank 1: RuntimeError: device "
                               "error on rank 1 (simulated)"), message
