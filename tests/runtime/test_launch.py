from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import types
from pathlib import Path

import pytest
import torch
import torch.distributed as dist

import ditron


def _whoami(tag: str) -> tuple:
    w = ditron.world()
    return (tag, w.rank, w.world_size, w.local_rank, w.local_world_size, w.backend)


@pytest.mark.parametrize("world_size", [1, 2, 3, 4])
def test_results_come_back_by_rank(backend, world_size):
    results = ditron.launch(_whoami, world_size, "x", backend=backend)
    assert results == [("x", r, world_size, r, world_size, backend) for r in range(world_size)]


def _fail_on(rank: int) -> int:
    w = ditron.world()
    if w.rank == rank:
        raise ValueError(f"deliberate failure on rank {w.rank}")
    ditron.barrier()  # the other ranks block here until they are killed
    return w.rank


def test_error_is_raised_with_rank_and_traceback(backend):
    start = time.monotonic()
    with pytest.raises(ValueError, match="deliberate failure on rank 2") as info:
        ditron.launch(_fail_on, 4, 2, backend=backend)
    assert info.value.rank == 2
    notes = "\n".join(getattr(info.value, "__notes__", []))
    assert "raised on rank 2" in notes and "_fail_on" in notes
    assert time.monotonic() - start < 60  # blocked ranks were stopped, not waited for


def _crash() -> None:
    if ditron.world().rank == 1:
        os._exit(7)
    ditron.barrier()


def test_crashed_rank_is_reported(backend):
    with pytest.raises(ditron.RankError, match="rank 1: process exited with code 7"):
        ditron.launch(_crash, 2, backend=backend)


def _segfault() -> None:
    if ditron.world().rank == 1:
        os.kill(os.getpid(), signal.SIGSEGV)
    ditron.barrier()


def test_rank_killed_by_a_signal_is_named(backend):
    with pytest.raises(ditron.RankError, match="rank 1: process was killed by SIGSEGV before "
                                               "returning: a bad memory access"):
        ditron.launch(_segfault, 2, backend=backend)


def _sleep_on_rank1() -> None:
    if ditron.world().rank == 1:
        time.sleep(60)


def test_launch_timeout_names_stuck_ranks(backend, monkeypatch):
    monkeypatch.setenv("DITRON_LAUNCH_TIMEOUT", "3")
    with pytest.raises(TimeoutError, match=r"ranks \[1\] had not returned"):
        ditron.launch(_sleep_on_rank1, 2, backend=backend)


def test_bad_world_size():
    with pytest.raises(ValueError, match="world_size must be a positive int"):
        ditron.launch(_whoami, 0, "x")


def _kwargs(a, *, b):
    return a + b + ditron.world().rank


def test_args_and_kwargs_reach_every_rank(backend):
    assert ditron.launch(_kwargs, 3, 10, b=5, backend=backend) == [15, 16, 17]


def _device_of_rank():
    w = ditron.world()
    t = torch.ones(2, device=w.device)
    return str(t.device)


def test_rank_device(backend):
    devices = ditron.launch(_device_of_rank, 2, backend=backend)
    assert all(d.startswith(backend) for d in devices)


def test_unpicklable_fn_is_a_clear_error():
    with pytest.raises(TypeError, match="must be picklable"):
        ditron.launch(lambda: 1, 2)


def _init_again() -> bool:
    w = ditron.world()
    again = ditron.init()
    with pytest.raises(RuntimeError, match="already initialised with backend"):
        ditron.init("cuda" if w.backend == "cpu" else "cpu")
    return again is w


def test_init_inside_launched_ranks_returns_the_same_world(backend):
    assert ditron.launch(_init_again, 2, backend=backend) == [True, True]


def _init_in_capitals() -> bool:
    w = ditron.world()
    return ditron.init(w.backend.upper()) is w


def test_backend_names_are_read_in_any_case(backend):
    """``backend="CPU"`` used to pass the launcher's checks yet start the ranks as if it
    were not the CPU backend (spawned, without the interpreter): every rank then failed
    in ``ditron.init``. ``init`` compared it with the world's ``"cpu"`` and refused it."""
    assert ditron.launch(_init_in_capitals, 2, backend=backend.upper()) == [True, True]
    assert ditron.launch(_whoami, 1, "x", backend=backend.capitalize()) == [
        ("x", 0, 1, 0, 1, backend)]


def test_fn_from_a_main_the_ranks_cannot_import_is_refused(monkeypatch):
    """A function (or class) of ``__main__`` pickles by name; under ``python -c``, standard
    input or a notebook the ranks cannot import that ``__main__``, and each used to die on
    start with multiprocessing's ``AttributeError`` (a ``RankError`` in the caller). It
    is refused before any rank starts; a script's ``__main__`` is fine (the test above)."""
    main = types.ModuleType("__main__")  # no __file__, no __spec__: as under python -c

    def fn() -> int:
        return 0

    fn.__module__, fn.__qualname__ = "__main__", "fn"
    main.fn = fn
    main.Options = type("Options", (), {"__module__": "__main__"})
    monkeypatch.setitem(sys.modules, "__main__", main)
    with pytest.raises(TypeError, match=r"ditron.launch: fn defined in __main__, which the "
                                        r"rank processes cannot import \(python -c"):
        ditron.launch(fn, 2)
    with pytest.raises(TypeError, match="Options defined in __main__"):
        ditron.launch(_whoami, 2, main.Options())
    main.__file__ = __file__  # a script file: the ranks import it as multiprocessing does
    from ditron.runtime.launch import _check_picklable

    _check_picklable(fn, (main.Options(),), {})


def _bad_launcher_env() -> int:
    """``ditron.init`` (after the launch's world is shut down) with malformed or
    inconsistent launcher variables; torch.distributed is not started."""
    ditron.shutdown()
    saved = {k: os.environ.pop(k) for k in ("RANK", "WORLD_SIZE", "DITRON_INIT_METHOD")}
    cases = [("x", "2", r"RANK must be an integer \(as torchrun or ditron.launch set it\), "
                        r"got 'x'"),
             ("0", "two", "WORLD_SIZE must be an integer"),
             ("1", "1", r"RANK=1 must be in \[0, WORLD_SIZE=1\)"),
             ("-1", "2", r"RANK=-1 must be in \[0, WORLD_SIZE=2\)")]
    try:
        for rank, size, message in cases:
            os.environ.update(RANK=rank, WORLD_SIZE=size)
            with pytest.raises(ValueError, match="ditron.init: " + message):
                ditron.init()
            assert not dist.is_initialized()
    finally:
        os.environ.update(saved)
    return len(cases)


def test_init_refuses_bad_launcher_variables():
    """``RANK`` outside ``[0, WORLD_SIZE)`` (a lone process with ``RANK=1`` set) used to
    wait for rank 0 in torch.distributed's rendezvous until its timeout (30 min); a value
    that is not an integer failed with int()'s message, which does not name it."""
    assert ditron.launch(_bad_launcher_env, 1, backend="cpu") == [4]


def _init_fails_then_again() -> tuple[bool, bool, bool]:
    ditron.shutdown()
    os.environ.pop("DITRON_INIT_METHOD")  # env:// on a free port, a file store is used once
    with pytest.raises((RuntimeError, OSError)):  # a heap the machine cannot map
        ditron.init(heap_size=1 << 50)
    left = dist.is_initialized()
    ditron.init(heap_size="16M")
    made = dist.is_initialized()
    ditron.shutdown()
    return left, made, dist.is_initialized()


def test_a_failed_init_leaves_no_process_group():
    """``init`` failing after it made the process group used to leave it made: the next
    ``init`` took it for the caller's and no ``shutdown`` destroyed it."""
    assert ditron.launch(_init_fails_then_again, 1, backend="cpu") == [(False, True, False)]


def _shutdown_itself() -> int:
    rank = ditron.world().rank
    ditron.shutdown()
    ditron.shutdown()  # idempotent
    return rank


def test_fn_may_shut_down_itself(backend):
    assert ditron.launch(_shutdown_itself, 2, backend=backend) == [0, 1]


def test_cuda_ranks_do_not_inherit_a_cpu_callers_interpreter(monkeypatch):
    """A caller on the CPU backend (the test suite on a GPU host) has ``TRITON_INTERPRET=1``
    and ``DITRON_BACKEND=cpu``; CUDA ranks import ditron with the environment they start
    with, so they must start as the CUDA backend without the interpreter. A caller whose
    default is CUDA and who set ``TRITON_INTERPRET`` is refused before any rank starts
    (the interpreter cannot run the cuda backend)."""
    from ditron.runtime import launch as launch_mod

    monkeypatch.setenv("TRITON_INTERPRET", "1")
    monkeypatch.setenv("DITRON_BACKEND", "cpu")
    assert launch_mod._rank_interpreter("cpu") == ("1", {})
    assert launch_mod._rank_interpreter("cuda") == (
        "", {"DITRON_BACKEND": "cuda", "TRITON_INTERPRET": None})
    monkeypatch.setattr(launch_mod, "default_backend", lambda: "cuda")
    with pytest.raises(RuntimeError, match=r"ditron.launch: Triton's interpreter "
                                           r"\(TRITON_INTERPRET=1\) cannot run the cuda"):
        launch_mod._rank_interpreter("cuda")
    for value in ("0", ""):
        monkeypatch.setenv("TRITON_INTERPRET", value)
        assert launch_mod._rank_interpreter("cuda") == (
            "", {"DITRON_BACKEND": "cuda", "TRITON_INTERPRET": None})
    monkeypatch.delenv("TRITON_INTERPRET")
    assert launch_mod._rank_interpreter("cuda") == (
        "", {"DITRON_BACKEND": "cuda", "TRITON_INTERPRET": None})
    # what the processes started inside see, and nothing changed afterwards
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    with launch_mod.environment(DITRON_BACKEND="cuda", TRITON_INTERPRET=None):
        assert os.environ["DITRON_BACKEND"] == "cuda" and "TRITON_INTERPRET" not in os.environ
    assert os.environ["DITRON_BACKEND"] == "cpu" and os.environ["TRITON_INTERPRET"] == "1"


def test_fork_server_starts_on_the_cpu_backend(monkeypatch):
    """The CPU ranks' fork server imports ditron as it starts; with ``DITRON_BACKEND`` unset
    that would probe for GPUs, which initialises CUDA in the process every CPU rank is
    forked from (and those ranks then fail on any CUDA call, as on a GPU host)."""
    from multiprocessing import forkserver

    from ditron.runtime import launch as launch_mod

    seen = {}

    def ensure_running():
        seen.update({k: os.environ.get(k) for k in ("DITRON_BACKEND", "TRITON_INTERPRET")})

    monkeypatch.setattr(launch_mod, "_CPU_CONTEXT", None)
    monkeypatch.setattr(forkserver, "ensure_running", ensure_running)
    monkeypatch.delenv("DITRON_BACKEND", raising=False)
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    launch_mod._cpu_context()
    assert seen == {"DITRON_BACKEND": "cpu", "TRITON_INTERPRET": "1"}
    assert "DITRON_BACKEND" not in os.environ and "TRITON_INTERPRET" not in os.environ


@pytest.mark.parametrize("value, on", [("1", True), ("true", True), ("Yes", True), ("2", True),
                                       ("", False), ("0", False), ("False", False),
                                       (" off ", False), ("no", False)])
def test_env_flags_read_one_way(value, on, monkeypatch):
    """Every on/off variable (DITRON_POISON, DITRON_CHECK_CALLS, DITRON_TRACE, and
    TRITON_INTERPRET where launch reads it) is read by ``config.env_flag``."""
    from ditron.runtime.config import Settings, env_flag

    monkeypatch.setenv("DITRON_CHECK_CALLS", value)
    monkeypatch.setenv("DITRON_POISON", value)
    assert env_flag("DITRON_CHECK_CALLS") is on
    settings = Settings.from_env("cpu", wait_timeout=0)  # no debug mode: off by default
    assert settings.check_calls is on and settings.poison is on


def test_host_collectives_use_gloo_where_ranks_share_a_device(monkeypatch):
    """NCCL refuses two ranks on one device: a node with more ranks than devices, or nodes
    simulated on one machine (``s52b``: W = 2 on two one-rank nodes failed on one GPU)."""
    from ditron.runtime.world import host_backend

    class TwoDevices:
        dist_backend = "nccl"

        def shares_devices(self, local_world_size):
            return local_world_size > 2

    monkeypatch.setenv("LOCAL_WORLD_SIZE", "4")
    assert host_backend(TwoDevices(), 4) == "gloo"  # 4 ranks of a node on 2 devices
    assert host_backend(TwoDevices(), 2) == "gloo"  # two simulated nodes of 2 on 4 processes
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "2")
    assert host_backend(TwoDevices(), 2) == "nccl"
    assert host_backend(TwoDevices(), 1) == "gloo"  # two one-rank nodes on one machine
    monkeypatch.delenv("LOCAL_WORLD_SIZE")
    assert host_backend(TwoDevices(), 2) == "nccl"  # no launcher's count: the node's own


def test_unguarded_launch_in_a_script_says_to_guard_it(tmp_path, backend):
    """A script calling ``launch`` at its top level: each rank re-imports it, and that
    re-import's call raises naming the fix instead of multiprocessing's bootstrap error."""
    script = tmp_path / "unguarded.py"
    script.write_text("import ditron\n\ndef main():\n    return ditron.world().rank\n\n"
                      "print(ditron.launch(main, 2))\n")
    root = str(Path(__file__).resolve().parents[2])
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [root, env.get("PYTHONPATH")]))
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                         timeout=300, cwd=tmp_path, env={**env, "DITRON_BACKEND": backend})
    assert out.returncode != 0
    assert 'put the call under `if __name__ == "__main__":`' in out.stderr, out.stderr
    assert "RankError: rank " in out.stderr and "its output above says why" in out.stderr
