"""How ``ditron.launch`` reports ranks that end without a usable result, refuses calls it
cannot serve, and leaves nothing behind when the launching process is stopped."""

from __future__ import annotations

import ctypes
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import torch
import torch.distributed as dist

import ditron
from ditron.runtime import launch as launch_mod
from ditron.runtime.agreement import refused_together


def _exit_on_rank1(code) -> str:
    if ditron.world().rank == 1:
        sys.exit(code)
    return "rank 0 returned"


@pytest.mark.parametrize("code, status", [(0, 0), ("bye", 1)])
def test_sys_exit_in_a_rank_is_a_rank_error(code, status):
    """``sys.exit`` in ``fn`` is a rank that ended without a result: re-raising its
    ``SystemExit`` would end the caller (with status 0, silently, for ``sys.exit(0)``)."""
    with pytest.raises(ditron.RankError, match=rf"rank 1: process exited with code {status} "
                                               r"\(SystemExit.* without returning a result"):
        ditron.launch(_exit_on_rank1, 2, code)


class _NoLoad:
    """Pickles, but unpickling calls ``_NoLoad()``, which needs an argument."""

    def __init__(self, a):
        self.a = a

    def __reduce__(self):
        return (_NoLoad, ())


def _unloadable_on_rank1():
    if ditron.world().rank == 1:
        return _NoLoad(1)
    time.sleep(30)  # killed once rank 1's result is found unusable


def test_result_that_cannot_be_unpickled_names_the_rank():
    """A result the caller cannot unpickle fails the launch as that rank's failure, the
    unpickling error chained, and the other ranks are stopped, not waited for."""
    start = time.monotonic()
    with pytest.raises(ditron.RankError, match="rank 1: its result could not be unpickled "
                                               r"in the launching process \(TypeError") as info:
        ditron.launch(_unloadable_on_rank1, 2)
    assert isinstance(info.value.__cause__, TypeError) and info.value.rank == 1
    assert time.monotonic() - start < 20


def _returns_a_lambda():
    rank = ditron.world().rank
    return lambda: rank


def test_result_that_cannot_be_pickled_says_so():
    """A result the rank cannot pickle used to come back as pickle's bare error ("Can't
    pickle local object ..."), as if ``fn`` had raised it."""
    with pytest.raises(TypeError, match=r"ditron.launch: fn's result on rank \d cannot be "
                                        r"pickled back to the launching process.*"
                                        r"AttributeError: Can't pickle local object"):
        ditron.launch(_returns_a_lambda, 2)


def _fail_after_the_others_return(world_size: int) -> str:
    if ditron.world().rank == 0:
        time.sleep(2)  # the others' results reach the launcher first
        raise ValueError("rank 0 went on alone")
    return "returned"


@pytest.mark.parametrize("world_size", [2, 3])
def test_a_failure_names_the_ranks_that_had_returned(world_size):
    """A rank that fails once others have returned (in a collective they will never join,
    it would time out) is reported with the ranks that had returned."""
    with pytest.raises(ValueError, match="went on alone") as info:
        ditron.launch(_fail_after_the_others_return, world_size, world_size)
    notes = "\n".join(info.value.__notes__)
    assert "raised on rank 0" in notes
    assert (f"ranks {list(range(1, world_size))} had already returned from fn (if this rank "
            f"failed waiting in a collective, the ranks made different collective calls)") in notes


def _ok_or_fail(fail: bool) -> str:
    if fail and ditron.world().rank == 1:
        raise ValueError("rank 1 failed")
    time.sleep(1)
    return "ok"


def test_a_failure_before_any_rank_returned_names_none():
    with pytest.raises(ValueError, match="rank 1 failed") as info:
        ditron.launch(_ok_or_fail, 2, True)
    assert "had already returned" not in "\n".join(info.value.__notes__)


def _rank() -> int:
    return ditron.world().rank


def _launch_inside() -> list:
    return ditron.launch(_rank, 1)


def test_launch_inside_a_rank_is_refused():
    """A rank's process cannot start ranks of its own (it is a daemon process): the nested
    call says so before starting anything."""
    with pytest.raises(RuntimeError, match="cannot be called inside a rank of another launch"):
        ditron.launch(_launch_inside, 1)


@pytest.mark.parametrize("groups", [[0, 1], [[0], 1], 2, "01", [[0], "1"]])
def test_groups_must_be_a_list_of_rank_lists(groups):
    """``groups`` is a list of lists of ranks; anything else is refused, naming the value,
    before any rank starts."""
    with pytest.raises(ValueError, match="list of rank lists.*got " + re.escape(repr(groups))):
        ditron.launch(_rank, 2, groups=groups)


def test_sigterm_handler_is_installed_only_during_the_launch():
    """The handler that stops a launch's ranks on SIGTERM replaces the default action only
    (not a handler of the program's, nor SIG_IGN), only in the main thread, and only while
    the launch runs."""
    assert signal.getsignal(signal.SIGTERM) == signal.SIG_DFL
    with launch_mod._stop_on_sigterm(lambda: None):
        assert callable(signal.getsignal(signal.SIGTERM))
    assert signal.getsignal(signal.SIGTERM) == signal.SIG_DFL

    def own(signum, frame):
        pass

    for handler in (own, signal.SIG_IGN):
        signal.signal(signal.SIGTERM, handler)
        try:
            with launch_mod._stop_on_sigterm(lambda: None):
                assert signal.getsignal(signal.SIGTERM) == handler
            assert signal.getsignal(signal.SIGTERM) == handler
        finally:
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
    seen = []

    def in_thread():
        with launch_mod._stop_on_sigterm(lambda: None):  # signal.signal would raise here
            seen.append(signal.getsignal(signal.SIGTERM))

    thread = threading.Thread(target=in_thread)
    thread.start()
    thread.join()
    assert seen == [signal.SIG_DFL]


_SCRIPT = """\
import os, sys, time
import ditron

def stuck(out):
    path = os.path.join(out, f"rank{ditron.world().rank}")
    with open(path + ".tmp", "w") as f:  # its process, the fork server's, the job's files
        f.write(f"{os.getpid()} {os.getppid()} {os.environ['DITRON_INIT_METHOD']}")
    os.replace(path + ".tmp", path)
    time.sleep(120)

if __name__ == "__main__":
    ditron.launch(stuck, 2, sys.argv[1])
"""


def _gone(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] in ("Z", "X")  # zombie: ended
    except FileNotFoundError:
        return True


def _stop_launcher(tmp_path: Path, sig: int) -> tuple[int, list[int], str]:
    """Start a script whose two ranks sleep, send ``sig`` to it once they run; its exit
    status, the ranks' and the fork server's pids, and the launch's temporary directory."""
    (tmp_path / "stuck.py").write_text(_SCRIPT)
    out = tmp_path / "out"
    out.mkdir()
    root = str(Path(__file__).resolve().parents[2])
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [root, env.get("PYTHONPATH")]))
    env["DITRON_BACKEND"] = "cpu"
    with open(tmp_path / "log", "w") as log:
        proc = subprocess.Popen([sys.executable, "stuck.py", str(out)], cwd=tmp_path, env=env,
                                stdout=log, stderr=subprocess.STDOUT)
    pids: list[int] = []
    try:
        deadline = time.monotonic() + 120
        while not all((out / f"rank{r}").exists() for r in range(2)):
            assert proc.poll() is None and time.monotonic() < deadline, (
                (tmp_path / "log").read_text())
            time.sleep(0.1)
        for r in range(2):
            rank_pid, server_pid, init = (out / f"rank{r}").read_text().split()
            pids += [int(rank_pid), int(server_pid)]
        proc.send_signal(sig)
        status = proc.wait(timeout=60)
        return status, sorted(set(pids)), os.path.dirname(init.removeprefix("file://"))
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def _wait_gone(pids: list[int], seconds: float) -> list[int]:
    """The processes of ``pids`` still running after ``seconds`` (killed then)."""
    deadline = time.monotonic() + seconds
    while not all(map(_gone, pids)) and time.monotonic() < deadline:
        time.sleep(0.1)
    left = [p for p in pids if not _gone(p)]
    for pid in left:
        os.kill(pid, signal.SIGKILL)
    return left


def test_sigterm_to_the_launcher_stops_its_ranks_and_removes_its_files(tmp_path):
    """SIGTERM to the launching process: it kills its ranks (and so the fork server exits),
    removes its temporary directory, and dies of the signal as it would have otherwise."""
    status, pids, workdir = _stop_launcher(tmp_path, signal.SIGTERM)
    left = _wait_gone(pids, 10)
    kept = os.path.exists(workdir)
    shutil.rmtree(workdir, ignore_errors=True)
    assert status == -signal.SIGTERM, (tmp_path / "log").read_text()
    assert not left, f"processes left running: {left}"
    assert not kept, f"{workdir} left behind"


def test_ranks_exit_when_the_launcher_is_killed(tmp_path):
    """A launching process killed outright cleans up nothing, but its ranks see it gone
    (the read end of their result pipe closed) and exit, and so does the fork server."""
    status, pids, workdir = _stop_launcher(tmp_path, signal.SIGKILL)
    shutil.rmtree(workdir, ignore_errors=True)  # nobody else will
    left = _wait_gone(pids, 10)
    assert status == -signal.SIGKILL
    assert not left, f"processes left running: {left}"
    assert "the process that launched it is gone" in (tmp_path / "log").read_text()


def _allocate_alone() -> str:
    if ditron.world().rank == 0:
        time.sleep(1)  # rank 1 is in its shutdown by now
        ditron.empty((4,), torch.float32)
    return "returned"


def test_a_rank_allocating_while_its_peer_shuts_down_raises():
    """Rank 1 returns (its shutdown waits for the others) while rank 0 allocates: both
    host calls used to wait for each other (a gloo barrier beside the allocation's gather)
    until the host group's timeout, 10 minutes or more. The shutdown's barrier is a host
    row now: both see the other's call and raise (the launch raises the first error to
    come back: rank 0's ValueError or rank 1's RuntimeError from its shutdown)."""
    start = time.monotonic()
    with pytest.raises((ValueError, RuntimeError),
                       match=r"ranks are in different collective calls(.|\n)*"
                             r"rank 1: ditron.shutdown"):
        ditron.launch(_allocate_alone, 2)
    assert time.monotonic() - start < 60


def _raise_before_a_barrier(kind: str) -> int:
    w = ditron.world()
    if w.rank == 1:
        raise ValueError("bad argument on rank 1")
    if kind == "dist":
        dist.barrier()
    else:
        ditron.barrier()
    return w.rank


@pytest.mark.parametrize("kind", ["dist", "ditron"])
def test_a_rank_raising_while_its_peer_waits_is_reported_at_once(monkeypatch, kind):
    """Rank 1 raises while rank 0 waits in a barrier for it: the launch raises rank 1's
    exception as soon as it arrives (the peer is killed), not the launch timeout."""
    monkeypatch.setenv("DITRON_LAUNCH_TIMEOUT", "30")
    start = time.monotonic()
    with pytest.raises(ValueError, match="bad argument on rank 1") as info:
        ditron.launch(_raise_before_a_barrier, 2, kind)
    assert info.value.rank == 1
    assert "_raise_before_a_barrier" in "\n".join(info.value.__notes__)
    assert time.monotonic() - start < 25


def _every_rank_raises() -> None:
    raise ValueError(f"the same error (rank {ditron.world().rank})")


def test_every_rank_raising_reports_one_of_them():
    with pytest.raises(ValueError, match=r"the same error \(rank (\d)\)") as info:
        ditron.launch(_every_rank_raises, 3)
    assert info.value.rank == int(re.search(r"rank (\d)", str(info.value)).group(1))


def _refuse_while_the_peer_is_elsewhere() -> int:
    """Rank 1 refuses its arguments and waits in the call's gather to tell its peers;
    rank 0 is in another collective, so both wait until the launch times out."""
    if ditron.world().rank == 1:
        with refused_together("my_op", peers=True):
            raise ValueError("my_op: size 7 does not divide by the world size")
    dist.barrier()
    return 0


def test_a_timeout_shows_the_exception_a_stuck_rank_handles_first(monkeypatch):
    """The cause of a hang is often an error a rank holds while it waits to tell its peers
    (they are in another call). The launch timeout used to say only "ranks [0, 1] had not
    returned"; it now shows that rank's exception and traceback first, then each rank's
    stack."""
    monkeypatch.setenv("DITRON_LAUNCH_TIMEOUT", "3")
    start = time.monotonic()
    with pytest.raises(TimeoutError) as info:
        ditron.launch(_refuse_while_the_peer_is_elsewhere, 2)
    message = str(info.value)
    assert message.startswith("ditron.launch: ranks [0, 1] had not returned 3 s after every "
                              "rank started (DITRON_LAUNCH_TIMEOUT); they were killed. "
                              "Where they were:\nrank 1 was handling ValueError: my_op: size "
                              "7 does not divide by the world size (likely the cause):\n"
                              "  Traceback (most recent call last):\n"), message
    first, second = message.index("rank 1 was handling"), message.index("rank 0 was at:")
    rank1, rank0 = message[first:second], message[second:]
    assert 'raise ValueError("my_op: size 7 does not divide' in rank1  # where it was raised
    assert "and was waiting at:" in rank1 and "in __exit__" in rank1  # the gather
    assert "in _refuse_while_the_peer_is_elsewhere\n    dist.barrier()" in rank0
    assert "had returned" not in message
    assert time.monotonic() - start < 30


def _one_rank_returns() -> str:
    ditron.barrier()
    if ditron.world().rank == 0:
        ditron.barrier()  # rank 1 has returned: never completes
    return "returned"


def test_a_timeout_shows_where_each_rank_was_and_who_returned(monkeypatch):
    monkeypatch.setenv("DITRON_LAUNCH_TIMEOUT", "3")
    with pytest.raises(TimeoutError) as info:
        ditron.launch(_one_rank_returns, 2)
    message = str(info.value)
    assert message.startswith("ditron.launch: ranks [0] had not returned 3 s after every rank "
                              "started (DITRON_LAUNCH_TIMEOUT); they were killed. Where they "
                              "were:\nrank 0 was at:\n"), message
    assert ("in _one_rank_returns\n    ditron.barrier()  # rank 1 has returned: never "
            "completes") in message
    assert message.endswith("ranks [1] had returned from fn (if the others were waiting in "
                            "a collective, the ranks made different collective calls)")
    assert "was handling" not in message


def _hold_the_gil() -> None:
    if ditron.world().rank == 0:
        ctypes.PyDLL(None).sleep(60)  # libc's sleep, the GIL held: no thread of it runs


def test_a_rank_that_cannot_answer_is_named(monkeypatch):
    """A rank whose Python threads cannot run (native code holding the GIL) cannot say
    where it is: the timeout names it after a short wait instead."""
    monkeypatch.setenv("DITRON_LAUNCH_TIMEOUT", "2")
    monkeypatch.setattr(launch_mod, "_WHERE_SECONDS", 1.0)
    with pytest.raises(TimeoutError, match=r"ranks \[0\] had not returned 2 s(.|\n)*rank 0 "
                                           r"did not say within 1 s \(busy in native code\?\)"):
        ditron.launch(_hold_the_gil, 2)
