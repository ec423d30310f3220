from __future__ import annotations

import datetime
import importlib
import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest
import torch


def _run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "ditron", *args], capture_output=True,
                          text=True, timeout=300)


def _main(*args: str, env: dict[str, str] | None = None,
          clear: bool = False) -> subprocess.CompletedProcess:
    """``python -m ditron ARGS`` run in this process (``ditron.cli.main``, which
    ``ditron/__main__.py`` exits with): its exit status, stdout and stderr, with ``env``
    added to the environment (``clear``: in place of every ``DITRON_*`` variable). For
    commands that stop before any rank starts (usage errors, help, ``info``), where a new
    process would cost only another import of torch and triton (seconds each). An
    exception other than ``SystemExit`` escapes, failing the test: the command would have
    ended with a traceback."""
    import contextlib
    import io
    from unittest import mock

    from ditron.cli import main

    out, err = io.StringIO(), io.StringIO()
    environ = {k: v for k, v in os.environ.items() if not (clear and k.startswith("DITRON_"))}
    with mock.patch.dict(os.environ, {**environ, **(env or {})}, clear=True), \
            contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(list(args))
        except SystemExit as exc:
            code = exc.code
    if not isinstance(code, int):  # None: success; a message: printed, status 1
        code = 0 if code is None else 1
    return subprocess.CompletedProcess(["ditron", *args], code, out.getvalue(), err.getvalue())


def test_info_reports_versions_and_backend():
    out = _run("info", "--backend", "cpu")
    assert out.returncode == 0, out.stderr
    assert "triton   3." in out.stdout and "backend  cpu" in out.stdout
    assert "agree    every call checked across ranks" in out.stdout  # cpu: a wait timeout
    assert "tuned    " in out.stdout and "tune.json (DITRON_CACHE_DIR)" in out.stdout
    # the other settings in this process: the same command, without another start-up
    for env, line in (({"DITRON_CHECK_CALLS": "0"}, "first call of each shape checked"),
                      ({"DITRON_WAIT_TIMEOUT": "0"}, "first call of each shape checked"),
                      ({"DITRON_WAIT_TIMEOUT": "0", "DITRON_CHECK_CALLS": "1"},
                       "every call checked")):
        out = _main("info", "--backend", "cpu", env=env)
        assert out.returncode == 0, out.stderr
        assert f"agree    {line} across ranks" in out.stdout, (env, out.stdout, out.stderr)
    # the DITRON_* variables of the environment, for bug reports
    for extra, line in (({}, "env      no DITRON_* variable set"),
                        ({"DITRON_CHECK_CALLS": "1", "DITRON_ENGINE": "sm"},
                         "env      DITRON_CHECK_CALLS=1, DITRON_ENGINE=sm (every setting: "
                         "docs/settings.md)")):
        out = _main("info", "--backend", "cpu", env=extra, clear=True)
        assert out.returncode == 0 and line in out.stdout, out.stderr


@pytest.mark.parametrize("backend, env, line", [
    ("cpu", {"DITRON_HEAP_SIZE": "64K"}, "heap     64 KiB per rank"),  # was "0 MiB"
    ("cpu", {"DITRON_HEAP_SIZE": "1536K"}, "heap     1536 KiB per rank"),  # was "2 MiB"
    ("cpu", {"DITRON_HEAP_SIZE": "1000"}, "heap     1000 bytes per rank"),
    ("cpu", {"DITRON_HEAP_SIZE": "1G"}, "heap     1 GiB per rank"),
    # the kernels' int32 poll counter caps a wait at 2**31 - 1 polls (2e6 a second on cuda)
    ("cuda", {"DITRON_WAIT_TIMEOUT": "5000"},
     "timeout  5000 s, the kernels give up after about 1074 s (DITRON_WAIT_TIMEOUT)"),
    ("cuda", {"DITRON_WAIT_TIMEOUT": "1000"}, "timeout  1000 s (DITRON_WAIT_TIMEOUT)"),
])
def test_info_shows_the_settings_the_kernels_get(backend, env, line, monkeypatch, capsys):
    """``ditron info`` printed the heap rounded to MiB (a 64K heap as 0 MiB) and a wait
    timeout the kernels cap at about 1074 s on cuda as it was given."""
    from ditron.cli import main

    for var, value in env.items():
        monkeypatch.setenv(var, value)
    assert main(["info", "--backend", backend]) == 0
    assert line in capsys.readouterr().out


def test_demo_verifies_against_torch():
    out = _run("demo", "--world-size", "3", "--n", "70", "--repeats", "2", "--backend", "cpu")
    assert out.returncode == 0, out.stderr
    assert "all results match torch" in out.stdout
    assert out.stdout.count(" ok ") >= 3


def test_demo_on_one_rank():
    """The demo on a world of one (a ring to itself, an all-gather of one chunk), in the
    singular: "2 ranks" and "3 rounds" read "1 ranks", "1 rounds" there."""
    out = _main("demo", "--world-size", "1", "--n", "65", "--repeats", "1", "--backend", "cpu")
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("ditron demo: 1 rank on the cpu backend, 65 fp32 per rank, "
                                 "1 round\n"), out.stdout
    assert "all results match torch" in out.stdout


def test_demo_past_int32_offsets_is_a_usage_error():
    """An all-gather of 2**31 elements or more (a heap made large enough for it) is refused
    before any rank starts: the kernel's ``rank * n`` is an int32 and wrapped to a negative
    offset, so the pushes wrote outside the peers' buffer."""
    from unittest import mock

    with mock.patch("ditron.launch", side_effect=AssertionError("the ranks were started")):
        out = _main("demo", "--world-size", "2", "--n", str(2**30), "--backend", "cpu",
                    env={"DITRON_HEAP_SIZE": "64G"})
    assert out.returncode == 2, (out.stdout, out.stderr)
    assert out.stderr == (f"ditron demo: --n {2**30} on 2 ranks: the all-gather's {2**31} "
                          f"elements pass the kernels' int32 offsets (at most {2**31 - 1}); "
                          f"lower --n\n")
    assert out.stdout == ""


@pytest.mark.parametrize("backend, args, gpus, free, words", [
    # each rank a process: 10000 started ten thousand of them
    ("cpu", ("--world-size", "10000"), 0, None, "--world-size 10000: the demo runs at most "),
    ("cpu", ("--world-size", "3"), 0, 2 << 30,
     "the symmetric heaps of 3 ranks (3 x 1073741824 bytes, DITRON_HEAP_SIZE) do not fit in "
     "/dev/shm, which has 2147483648 bytes free; set DITRON_HEAP_SIZE lower (the demo uses"),
    ("cuda", ("--world-size", "9"), 1, None,
     "--world-size 9: the demo runs at most 8 ranks on the cuda backend here (8 per GPU on "
     "the 1 visible: ranks beyond the GPUs share them); lower --world-size"),
    ("cuda", (), 2, None, None),  # the default: one rank per GPU, at least 2
    ("cuda", ("--world-size", "16"), 2, None, None),
])
def test_demo_world_size_is_bounded(backend, args, gpus, free, words, monkeypatch):
    """More ranks than the backend can hold are a usage error before any rank starts: on
    the cpu backend (a process each) at most 64 or one per core, and heaps that fit in
    /dev/shm (each rank raised after start-up); on the cuda backend 8 per GPU."""
    from unittest import mock

    import ditron.demo

    real_statvfs = os.statvfs

    def statvfs(path):
        st = real_statvfs(path)
        return mock.Mock(f_bavail=free // st.f_frsize, f_frsize=st.f_frsize)

    if free is not None:
        monkeypatch.setattr(os, "statvfs", statvfs)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: gpus)
    started = []
    monkeypatch.setattr(ditron.demo.ditron, "launch",
                        lambda fn, world_size, *a, **k: started.append(world_size) or [])
    out = _main("demo", "--backend", backend, *args, env={"DITRON_HEAP_SIZE": "1G"})
    if words is None:
        assert out.returncode == 0 and started == [int(args[1]) if args else 2], out.stderr
        return
    assert out.returncode == 2 and not started, (out.stdout, out.stderr)
    assert out.stderr.startswith("ditron demo: " + words), out.stderr
    assert out.stdout == ""


def _rank_one_raises(n: int, repeats: int) -> dict:
    """In place of the demo's ranks: rank 1 raises, the others wait for it in a barrier."""
    import ditron

    if ditron.world().rank == 1:
        raise ValueError("rank one's own error")
    ditron.barrier()
    return {}


def test_failed_rank_is_reported_once():
    """A rank that raises ends the command with exit status 1 and the rank's traceback,
    its error once; it printed the launching process's traceback (cli, demo, launch) and
    the rank's error twice."""
    from unittest import mock

    with mock.patch("ditron.demo._rank_demo", _rank_one_raises):
        out = _main("demo", "--world-size", "3", "--repeats", "1", "--backend", "cpu")
    assert out.returncode == 1, out.stderr
    assert out.stderr.startswith("ditron demo: rank 1 failed:\nTraceback"), out.stderr
    assert out.stderr.count("ValueError: rank one's own error") == 1, out.stderr
    assert out.stderr.endswith("ValueError: rank one's own error\n"), out.stderr
    assert "_rank_one_raises" in out.stderr and "ditron/cli.py" not in out.stderr, out.stderr


class _Unpicklable(ValueError):
    """An error that cannot be pickled back to the launching process (it holds a lock)."""

    def __init__(self, message: str):
        super().__init__(message)
        self.lock = threading.Lock()


def _rank_one_unpicklable(n: int, repeats: int) -> dict:
    """In place of the demo's ranks: rank 1 raises an error that cannot be pickled."""
    import ditron

    if ditron.world().rank == 1:
        raise _Unpicklable("rank one's own error")
    ditron.barrier()
    return {}


def _rank_one_exits(n: int, repeats: int) -> dict:
    import ditron

    if ditron.world().rank == 1:
        sys.exit("rank one exits")
    ditron.barrier()
    return {}


def _rank_one_dies(n: int, repeats: int) -> dict:
    import ditron

    if ditron.world().rank == 1:
        os._exit(3)
    ditron.barrier()
    return {}


@pytest.mark.parametrize("fn, head, last", [
    # its error was printed twice: RankError's message holds the error and its traceback
    (_rank_one_unpicklable, "rank 1 failed:\nTraceback", "_Unpicklable: rank one's own error"),
    (_rank_one_exits, "rank 1: process exited with code 1 (SystemExit('rank one exits'), e.g. "
                      "sys.exit) without returning a result:\nTraceback",
     "SystemExit: rank one exits"),
    (_rank_one_dies, "rank 1: process exited with code 3 before returning",
     "(its output above says why)"),
])
def test_every_kind_of_rank_failure_is_reported_once(fn, head, last):
    """However a rank fails, the command ends with exit status 1, the rank's error once and
    its traceback where one came back, and no frame of the launching process."""
    from unittest import mock

    with mock.patch("ditron.demo._rank_demo", fn):
        out = _main("demo", "--world-size", "2", "--repeats", "1", "--backend", "cpu")
    assert out.returncode == 1, out.stderr
    assert out.stderr.startswith(f"ditron demo: {head}"), out.stderr
    assert out.stderr.count(last) == 1 and out.stderr.endswith(last + "\n"), out.stderr
    assert "ditron/cli.py" not in out.stderr, out.stderr


def ditron_launch(*args, **kw):
    """``ditron.launch``."""
    import ditron

    return ditron.launch(*args, **kw)


def test_an_error_that_only_looks_like_a_ranks_is_the_commands():
    """An error of the command itself is not taken for a rank's failure by its text: the
    CLI recognised a rank's error by the note ``ditron.launch`` adds and a ``rank``
    attribute, so an error carrying such a note was printed as rank 1's (exit 1) and its
    own traceback was lost."""
    from unittest import mock

    error = RuntimeError("the demo's own bug")
    error.rank = 1
    error.add_note("[ditron] raised on rank 1; remote traceback:\nTraceback: elsewhere")
    with mock.patch("ditron.demo.run", side_effect=error):
        with pytest.raises(RuntimeError, match="the demo's own bug"):
            _main("demo", "--world-size", "2", "--backend", "cpu")
    # nor a TimeoutError whose text begins as the launch's
    timeout = TimeoutError("ditron.launch: a timeout of the command's own")
    with mock.patch("ditron.demo.run", side_effect=timeout):
        with pytest.raises(TimeoutError, match="of the command's own"):
            _main("demo", "--world-size", "2", "--backend", "cpu")


def test_launch_marks_the_failure_it_raises():
    """``ditron.launch`` attaches the rank, a headline and the rank's traceback to the
    exception it raises (``rank_failure``); the note for people stays."""
    from ditron.runtime.launch import rank_failure

    with pytest.raises(ValueError) as info:
        ditron_launch(_rank_one_raises, 2, 1, 1, backend="cpu")
    failure = rank_failure(info.value)
    assert (failure.rank, failure.headline, info.value.rank) == (1, "rank 1 failed:", 1)
    assert failure.traceback.startswith("Traceback (most recent call last):"), failure
    assert failure.traceback.endswith("ValueError: rank one's own error"), failure
    assert "_rank_one_raises" in failure.traceback
    assert info.value.__notes__[-1].startswith("[ditron] raised on rank 1; remote traceback:")
    assert rank_failure(ValueError("not from a launch")) is None


def test_launch_timeout_is_reported_without_the_launcher_frames():
    """A launch that times out (``DITRON_LAUNCH_TIMEOUT``) says where each rank was, after
    the command's name, not under the launching process's traceback."""
    from unittest import mock

    from ditron.runtime.launch import LaunchTimeoutError

    error = LaunchTimeoutError("ditron.launch: ranks [0] had not returned 1 s after every "
                               "rank started (DITRON_LAUNCH_TIMEOUT); they were killed.")
    with mock.patch("ditron.launch", side_effect=error):
        out = _main("demo", "--world-size", "2", "--backend", "cpu")
    assert out.returncode == 1, out.stderr
    assert out.stderr == f"ditron demo: {error}\n"


@pytest.mark.parametrize("command", [["demo", "--backend", "cpu"], ["trace"],
                                     ["bench", "tp-gemm", "--smoke"]])
def test_interrupt_is_one_line(command):
    """Ctrl-C during a command: one line and exit status 130 (a KeyboardInterrupt
    traceback through the launch before)."""
    from unittest import mock

    with mock.patch("ditron.launch", side_effect=KeyboardInterrupt):
        try:
            out = _main(*command)
        except KeyboardInterrupt:  # escaped: a traceback (and pytest would stop here)
            pytest.fail("the KeyboardInterrupt escaped the command")
    assert out.returncode == 130, out.stderr
    name = " ".join(command[:2] if command[0] == "bench" else command[:1])
    assert out.stderr == f"ditron {name}: interrupted\n"


@pytest.mark.parametrize("after", [0.3, 3.0])
def test_ctrl_c_stops_the_ranks(after):
    """Ctrl-C (SIGINT to the terminal's process group: the command, its fork server and its
    ranks) while the fork server imports ditron (0.3 s: it printed the import's
    KeyboardInterrupt traceback, and a rank it forked afterwards that its launcher was
    gone) or while the ranks run: one line, exit status 130, no process left."""
    import signal
    import time

    proc = subprocess.Popen(
        [sys.executable, "-m", "ditron", "demo", "--world-size", "2", "--n", "8", "--repeats",
         "1000000", "--backend", "cpu"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True, start_new_session=True,  # a group of its own, as a shell's job
        preexec_fn=_sigint_default)
    try:
        assert proc.stdout.readline().startswith("ditron demo: 2 ranks")  # ranks start now
        time.sleep(after)
        os.killpg(proc.pid, signal.SIGINT)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
    assert proc.returncode == 130 and err == "ditron demo: interrupted\n", err
    deadline = time.monotonic() + 20  # the fork server ends once it sees its caller gone
    while (left := _running_in_group(proc.pid)) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not left, left


def _sigint_default() -> None:
    """Ctrl-C's default action in the command, as an interactive shell gives it: pytest
    started as a background job (``cmd &`` in a script or CI step, with or without
    pytest-xdist) ignores SIGINT, which a child inherits (and Python then installs no
    handler)."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _running_in_group(pgid: int) -> list[str]:
    """The processes of group ``pgid`` still running (not zombies): ``pid state``."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()  # after "pid (command)"
            if int(fields[2]) == pgid and fields[0] != "Z":
                command = (stat.parent / "cmdline").read_bytes().replace(b"\0", b" ")
                found.append(f"{stat.parent.name} {fields[0]} {command[:120].decode()}")
        except OSError:  # ended meanwhile
            continue
    return found


def test_closed_stdout_is_no_traceback():
    """``ditron info | head -1``: the reader gone, the command ends with exit status 1 and
    says nothing (a BrokenPipeError traceback before)."""
    proc = subprocess.Popen([sys.executable, "-m", "ditron", "info", "--backend", "cpu"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    proc.stdout.close()  # before ditron has written anything
    err = proc.stderr.read()
    assert proc.wait(timeout=120) == 1 and err == "", err


@pytest.mark.parametrize("env, args, words", [
    ({"DITRON_LOCAL_WORLD_SIZE": "2"}, ("--world-size", "4"),
     "DITRON_LOCAL_WORLD_SIZE=2 puts the 4 ranks on several nodes"),
    ({"DITRON_HEAP_SIZE": "64K"}, ("--world-size", "2", "--n", "4000"),
     "--n 4000 on 2 ranks needs 81152 bytes of symmetric heap per rank, more than "
     "DITRON_HEAP_SIZE (65536 bytes)"),
])
def test_demo_that_cannot_run_is_a_usage_error(env, args, words):
    """Settings the demo cannot run under are refused before any rank starts (ranks on
    several simulated nodes crashed with SIGSEGV, a heap too small raised in the ranks)."""
    out = subprocess.run([sys.executable, "-m", "ditron", "demo", "--backend", "cpu", *args],
                         capture_output=True, text=True, timeout=300, env={**os.environ, **env})
    assert out.returncode == 2 and words in out.stderr, out.stderr
    assert "Traceback" not in out.stderr and out.stdout == ""


def test_unknown_benchmark_is_an_error():
    out = _main("bench", "no-such-bench")
    assert out.returncode == 2 and "unknown benchmark 'no-such-bench'" in out.stderr
    assert "choose one of collectives, megakernel, moe, tp-gemm, tp-mlp" in out.stderr
    # the package's own module is no benchmark (it was imported and had no main: a traceback)
    out = _main("bench", "__init__")
    assert out.returncode == 2 and "unknown benchmark '__init__'" in out.stderr, out.stderr
    assert "Traceback" not in out.stderr
    # an option before the name: its value was taken for the name, with no word of why
    out = _main("bench", "--world-size", "2", "tp-gemm", "--smoke")
    assert out.returncode == 2 and "unknown benchmark '2' (the name comes before its " \
        "options: ditron bench tp-gemm [options])" in out.stderr, out.stderr


def test_bench_help_lists_the_benchmarks():
    """``ditron bench --help`` lists every benchmark with what it times (it used to be a
    usage error); ``ditron bench`` alone prints the same list as an error."""
    out = _main("bench", "--help")
    assert out.returncode == 0, out.stderr
    lines = {line.split()[0]: line for line in out.stdout.splitlines()
             if line.startswith("  ")}
    assert sorted(lines) == ["collectives", "megakernel", "moe", "tp-gemm", "tp-mlp"]
    assert "Overlapped TP GEMMs vs torch.matmul" in lines["tp-gemm"]
    bare = _main("bench")
    assert bare.returncode == 2 and "tp-mlp" in bare.stderr and not bare.stdout


@pytest.mark.parametrize("name", ["collectives", "tp-gemm", "tp-mlp", "megakernel", "moe"])
def test_every_benchmark_answers_help(name):
    out = _main("bench", name, "--help")
    assert out.returncode == 0, out.stderr
    assert f"usage: ditron bench {name}" in out.stdout


def _check_provenance(meta: dict, bench: str, **settings) -> None:
    """A benchmark's JSON names its command, date, device, versions and settings."""
    import triton

    import ditron

    assert meta["command"].startswith(f"python -m ditron bench {bench} "), meta
    assert meta["device"] == "cpu" and meta["backend"] == "cpu", meta
    assert (meta["torch"], meta["triton"], meta["ditron"]) == (
        torch.__version__, triton.__version__, ditron.__version__), meta
    age = datetime.datetime.now(datetime.UTC) - datetime.datetime.fromisoformat(meta["date"])
    assert datetime.timedelta(0) <= age < datetime.timedelta(hours=1), meta
    assert {k: meta.get(k) for k in settings} == settings, meta


def test_bench_collectives_smoke(tmp_path):
    out = _run("bench", "collectives", "--backend", "cpu", "--world-size", "2",
               "--sizes", "4K", "--ops", "all_gather,reduce_scatter,all_reduce", "--warmup", "1",
               "--iters", "2", "--graphs", "--busy", "--out", str(tmp_path))
    assert out.returncode == 0, out.stderr
    assert "deprecated" not in out.stderr, out.stderr  # torch 2.13 renamed NCCL's baselines
    assert "all_gather" in out.stdout and (tmp_path / "collectives.json").exists()
    assert "CUDA graphs need the cuda backend" in out.stdout
    saved = json.loads((tmp_path / "collectives.json").read_text())
    records = saved["records"]
    _check_provenance(saved["meta"], "collectives", warmup=1, iters=2, world_size=2)
    assert "--graphs" in saved["meta"]["command"]
    impls = {r["impl"] for r in records if r["op"] == "all_gather"}
    assert {"copy_engine", "copy_engine busy", "sm busy", "copy_engine/symmetric-out",
            "copy_engine/symmetric-out busy", "copy_engine/out", "sm/out busy"} <= impls
    rs = {r["impl"] for r in records if r["op"] == "reduce_scatter"}
    assert {"copy_engine/out", "sm/out", "copy_engine/out busy"} <= rs
    assert all(r["us"] > 0 for r in records)
    # the table's columns line up whatever the labels' lengths: "bytes" ends where each row's
    # byte count ends
    lines = out.stdout.splitlines()
    head = next(i for i, line in enumerate(lines) if line.startswith("op") and "bytes" in line)
    end = lines[head].index("bytes") + len("bytes")
    rows = [line for line in lines[head + 1:] if line.split()[:1] and line.split()[0] in
            {"all_gather", "reduce_scatter", "all_reduce"}]
    assert rows and all(line[:end].rstrip().endswith(line[:end].split()[-1]) and
                        line[end - 1].isdigit() for line in rows), lines[head:head + 4]


@pytest.mark.parametrize("given", [None, "3G"])
def test_bench_collectives_leaves_the_callers_environment(given, monkeypatch, tmp_path):
    """``ditron bench collectives`` gives its ranks a heap for its largest size, without
    changing the environment of the process that calls it (``DITRON_HEAP_SIZE`` stayed
    set there, for every launch and ``ditron.init`` it made later); a heap size the caller
    set is the ranks' too."""
    from unittest import mock

    from ditron.benchmarks import collectives

    if given is None:
        monkeypatch.delenv("DITRON_HEAP_SIZE", raising=False)
    else:
        monkeypatch.setenv("DITRON_HEAP_SIZE", given)
    seen = []
    with mock.patch("ditron.launch",
                    side_effect=lambda *a, **k: seen.append(os.environ.get("DITRON_HEAP_SIZE"))):
        assert collectives.main(["--backend", "cpu", "--world-size", "3", "--sizes", "64M",
                                 "--out", str(tmp_path)]) == 0
    assert seen == [str(6 * 3 * (64 << 20) + (1 << 30)) if given is None else given]
    assert os.environ.get("DITRON_HEAP_SIZE") == given
    # restored when the launch fails too
    with mock.patch("ditron.launch", side_effect=RuntimeError("a rank failed")):
        with pytest.raises(RuntimeError, match="a rank failed"):
            collectives.main(["--backend", "cpu", "--out", str(tmp_path)])
    assert os.environ.get("DITRON_HEAP_SIZE") == given


def test_bench_tp_gemm_smoke(tmp_path, monkeypatch):
    monkeypatch.setenv("DITRON_CACHE_DIR", str(tmp_path / "cache"))
    # a list with spaces as the other benchmarks take it; --graphs on the CPU said nothing
    out = _run("bench", "tp-gemm", "--smoke", "--tune", "--ops", " ag", "--graphs", "--out",
               str(tmp_path))
    assert out.returncode == 0, out.stderr
    assert "--graphs: CUDA graphs need the cuda backend; timing eagerly only" in out.stderr
    saved = json.loads((tmp_path / "tp_gemm.json").read_text())
    results = saved["results"]
    # --smoke's timing defaults, as run (the file named neither warm-up nor timed calls)
    _check_provenance(saved["meta"], "tp-gemm", warmup=1, iters=3, tune=True)
    assert saved["meta"]["command"].endswith("--graphs --out " + str(tmp_path))
    assert results and all(r["tuned_method"] in ("overlap", "fallback") for r in results)
    assert all(r["auto"] > 0 and r["eff_auto"] > 0 for r in results)
    assert "eff_auto" in out.stdout.splitlines()[0]
    assert list((tmp_path / "cache").iterdir()), "the tuner cached no decision"


def test_bench_tp_gemm_shape_subset():
    from ditron.benchmarks.tp_gemm import shapes

    rows = shapes(["ag", "rs"], 1.0, False, 2, "4096x11008, 11008x4096")
    assert rows == [("ag_gemm", 8192, 11008, 4096), ("gemm_rs", 8192, 4096, 11008)]
    assert len(shapes(["ag", "rs"], 1.0, False, 2)) == 12
    with pytest.raises(ValueError, match="not one of the shapes of --ops"):
        shapes(["ag"], 1.0, False, 2, "4096x11008")  # a GEMM-RS shape
    with pytest.raises(ValueError, match="'4096by11008' is not one"):
        shapes(["rs"], 1.0, False, 2, "4096by11008")
    with pytest.raises(ValueError, match="--smoke .* runs tiny ones"):
        shapes(["rs"], 1.0, True, 2, "11008x4096")
    with pytest.raises(ValueError, match="--ops: a comma list of ag and rs, got 'ag,ar'"):
        shapes(["ag", "ar"], 1.0, False, 2)


@pytest.mark.parametrize("args, words", [
    (("demo", "--world-size", "0"), "argument --world-size: must be a positive integer, got 0"),
    (("demo", "--n", "x"), "argument --n: not an integer: 'x'"),
    # under the top-level usage, "ditron: error: ..." before
    (("info", "--backend", "cpu", "extra"), "ditron info: error: unrecognized arguments: extra"),
    (("demo", "--n", "3", "4"), "usage: ditron demo [-h]"),
    (("bench", "collectives", "--sizes", "4K,4Q"),
     "argument --sizes: cannot read a byte count from '4Q'"),
    (("bench", "tp-gemm", "--warmup", "-1"), "argument --warmup: must be an integer >= 0, got -1"),
    (("bench", "tp-gemm", "--backend", "cpu", "--shapes", "4096x11008"),
     "--shapes picks REFERENCES.md shapes"),
    (("bench", "moe", "--topk", "0"), "argument --topk: must be a positive integer, got 0"),
    (("trace", "--calls", "0"), "argument --calls: must be a positive integer, got 0"),
    (("trace", "--world-size", "1"), "--world-size 1: one rank runs a plain GEMM"),
    (("bench", "tp-gemm", "--world-size", "1"), "--world-size 1: one rank has nothing to overlap"),
    # ran before, its "speed-up" the fallback against itself (one rank overlaps nothing)
    (("bench", "tp-mlp", "--smoke", "--world-size", "1"),
     "--world-size 1: one rank has nothing to overlap"),
    (("trace", "--m", "65"), "--m 65 (global rows) does not split over --world-size 2 ranks"),
    (("bench", "moe", "--out", "{tmp}"), "argument --out: '{tmp}' is a folder; give a file"),
    (("bench", "collectives", "--out", "{tmp}/file"), "argument --out: '{tmp}/file' is a file,"),
    (("trace", "--out", "{tmp}/file/x"), "argument --out: cannot make the folder for"),
    (("bench", "tp-mlp", "--shape", "64,32"),
     "argument --shape: expected 3 comma-separated integers (tokens,hidden,ffn), got '64,32'"),
    (("bench", "megakernel", "--shape", "16,x,64"), "argument --shape: not an integer: 'x'"),
    (("bench", "megakernel", "--warps", "3"), "argument --warps: invalid choice: 3"),
    (("bench", "moe", "--layer-tokens", "128,0"),
     "argument --layer-tokens: must be a positive integer, got 0"),
    (("bench", "moe", "--parts", "gemm,layers"),
     "argument --parts: a comma list of gemm, wgrad, a2a, dispatch, layer; got 'gemm,layers'"),
    (("bench", "collectives", "--ops", "all_gather,allreduce"),
     "argument --ops: a comma list of all_gather, reduce_scatter, all_reduce, all_to_all;"),
    (("bench", "collectives", "--engines", "sm,nccl"),
     "argument --engines: a comma list of copy_engine, sm, network, tma; got 'sm,nccl'"),
    (("bench", "tp-gemm", "--ops", "ag,gemm"), "argument --ops: a comma list of ag, rs; got"),
    (("bench", "tp-gemm", "--scale", "-0.5"), "argument --scale: must be a finite number > 0"),
    (("bench", "tp-gemm", "--scale", "inf"), "argument --scale: must be a finite number > 0"),
    # ignored before: the CPU backend runs --smoke's tiny shapes
    (("bench", "tp-gemm", "--backend", "cpu", "--scale", "0.5"),
     "--scale scales the REFERENCES.md shapes, but --smoke"),
    # ignored silently before: --smoke replaced them with its tiny shapes
    (("bench", "tp-mlp", "--smoke", "--shape", "64,64,64"),
     "--smoke runs its own tiny shapes; --shape would be ignored (leave it out"),
    (("bench", "megakernel", "--smoke", "--layers", "3"),
     "--smoke runs its own tiny shapes; --layers would be ignored"),
    (("bench", "moe", "--smoke", "--topk", "4", "--hidden", "512"),
     "--smoke runs its own tiny shapes; --hidden, --topk would be ignored (leave them out"),
    # failed late, in every rank, on a GPU ("selected index k out of range", a view error)
    (("bench", "moe", "--topk", "65"), "--topk 65: more experts per token than --experts 64"),
    (("bench", "moe", "--parts", "dispatch", "--hidden", "200"),
     "--hidden 200: the dispatch rows' fp8 scales are per 128 channels"),
])
def test_bad_option_values_are_usage_errors(args, words, tmp_path):
    """Refused by the parser, naming the option, before any rank starts (an output path
    that cannot be written used to fail after the whole benchmark had run)."""
    (tmp_path / "file").write_text("")
    args = [a.replace("{tmp}", str(tmp_path)) for a in args]
    words = words.replace("{tmp}", str(tmp_path))
    out = _main(*args)
    assert out.returncode == 2, out.stderr
    assert words in out.stderr and "Traceback" not in out.stderr, out.stderr


def test_smoke_keeps_the_timing_options_given():
    """``--smoke`` sets its tiny shapes and its short timing, but keeps a timing option the
    command line gives (it used to replace every one silently)."""
    import argparse

    from ditron.runtime.arguments import add_timing_options, int_list, smoke_defaults

    p = argparse.ArgumentParser()
    p.add_argument("--shape", default="8,8", type=int_list(("m", "n")))
    add_timing_options(p, 3, 20, rounds=4)
    argv = ["--iters", "7", "--warmup", "3"]  # --warmup given at its default value
    args = p.parse_args(argv)
    smoke_defaults(p, argv, args, {"shape": [2, 2]}, {"warmup": 1, "iters": 2, "rounds": 1})
    assert (args.shape, args.warmup, args.iters, args.rounds) == ([2, 2], 3, 7, 1)
    with pytest.raises(SystemExit):
        smoke_defaults(p, ["--shape", "8,8"], p.parse_args(["--shape", "8,8"]),
                       {"shape": [2, 2]}, {})


@pytest.mark.parametrize("var, value, args", [
    ("DITRON_WAIT_TIMEOUT", "30s", ("info", "--backend", "cpu")),
    ("DITRON_HEAP_SIZE", "lots", ("demo", "--world-size", "2", "--backend", "cpu")),
    ("DITRON_LAUNCH_TIMEOUT", "-1", ("bench", "tp-gemm", "--smoke", "--world-size", "2")),
])
def test_bad_setting_is_a_usage_error(var, value, args):
    """A malformed ``DITRON_*`` variable: one line naming it, exit code 2, no traceback."""
    out = _main(*args, env={var: value})
    assert out.returncode == 2, out.stderr
    assert out.stderr.startswith(f"ditron: {var}") and "Traceback" not in out.stderr, out.stderr


def test_bench_tp_mlp_smoke(tmp_path):
    out = _run("bench", "tp-mlp", "--smoke", "--world-size", "2", "--out",
               str(tmp_path / "mlp.json"))
    assert out.returncode == 0, out.stderr
    row = json.loads((tmp_path / "mlp.json").read_text())
    _check_provenance(row["meta"], "tp-mlp", warmup=1, iters=2, world_size=2)
    for kind in ("forward", "step"):
        assert row[f"fallback_{kind}"] > 0 and row[f"overlap_{kind}"] > 0
        assert row[f"speedup_{kind}"] == row[f"fallback_{kind}"] / row[f"overlap_{kind}"]
    assert "speed-up" in out.stdout


def test_bench_moe_smoke(tmp_path):
    out = _run("bench", "moe", "--smoke", "--world-size", "2", "--parts",
               "gemm,wgrad,a2a,dispatch,layer", "--profile", "--out", str(tmp_path / "moe.json"))
    assert out.returncode == 0, out.stderr
    # --profile profiles the layer on every rank (its dispatch is collective: rank 0 alone
    # ran it, on GPUs only, and waited for rank 1 forever), rank 0 prints it
    assert out.stdout.count("ditron layer, 6 tokens: CPU time by operator") == 1, out.stdout
    saved = json.loads((tmp_path / "moe.json").read_text())
    _check_provenance(saved["meta"], "moe", warmup=1, iters=2, profile=True)
    rows = {row["part"]: row for row in saved["rows"]}
    assert set(rows) == {"gemm", "wgrad", "a2a", "dispatch", "layer"}
    for part, names in (("gemm", ("ditron", "ditron_triton", "torch_loop", "dense")),
                        ("wgrad", ("ditron", "torch_loop")),
                        ("a2a", ("fused", "unfused", "plain")),
                        ("dispatch", ("bf16", "fp8", "fp8_apart")),
                        ("layer", ("ditron", "torch"))):
        assert all(rows[part][name] > 0 for name in names), (part, rows[part])
    # every result against the bench's own torch reference (a NaN fails the comparison)
    for part in ("gemm", "wgrad", "layer"):
        assert rows[part]["max_rel_err"] < 3e-2, (part, rows[part]["max_rel_err"])
    assert rows["a2a"]["same_result"] is True
    # fp8 rows dequantised with their moved scales against the bf16 rows (e4m3: 2^-4)
    assert rows["dispatch"]["same_groups"] is True and rows["dispatch"]["fp8_rel_err"] < 0.07


def test_bench_moe_gated_layer_smoke(tmp_path):
    out = _run("bench", "moe", "--smoke", "--parts", "layer", "--gated", "--out",
               str(tmp_path / "moe.json"))
    assert out.returncode == 0, out.stderr
    (row,) = json.loads((tmp_path / "moe.json").read_text())["rows"]
    assert row["gated"] is True and row["ditron"] > 0 and row["torch"] > 0
    # bf16 rounds h, silu(gate) and the product on both sides (fp32: equal, 0.0)
    assert row["max_rel_err"] < 5e-2, row["max_rel_err"]
    assert "SwiGLU" in out.stdout


def test_bench_megakernel_smoke(tmp_path):
    import torch

    from ditron.task.tp_mlp import MlpBlocks
    from ditron.task.tp_mlp_tuner import candidates

    # through the script path that docs/perf.md's recorded commands use
    script = Path(__file__).resolve().parents[1] / "bench" / "megakernel.py"
    env = {**os.environ, "DITRON_CACHE_DIR": str(tmp_path / "cache")}
    out = subprocess.run([sys.executable, str(script), "--smoke", "--world-size", "2", "--out",
                          str(tmp_path / "mk.json"), "--trace", str(tmp_path / "mk"), "--tune"],
                         capture_output=True, text=True, timeout=300, env=env)
    assert out.returncode == 0, out.stderr
    # --tune: the tuner's choice (one of its CPU candidates) is cached and timed too
    tuned = json.loads((tmp_path / "cache" / "tune.json").read_text())
    (entry,) = tuned.values()
    chosen = MlpBlocks(**entry["blocks"]).label()
    assert json.loads((tmp_path / "mk.json").read_text())["tuned"]["blocks"] == chosen
    cpu = [b.label() for b in candidates(16, 64, 128, torch.bfloat16, torch.device("cpu"))]
    assert chosen in cpu and f"tuner chose {chosen}" in out.stdout
    row = json.loads((tmp_path / "mk.json").read_text())
    for batch in ("batch1", "batch8"):
        assert row[batch]["torch"] > 0 and row[batch]["megakernel_16x16x16x32x2"] > 0
    assert row["max_rel_error"]["16x16x16x32x2"] < 5e-2  # bf16 against torch's bf16 ops
    assert "torch / this" in out.stdout
    # the traced call: every task of both layers, and a trace file per rank
    tasks = row["trace"]["16x16x16x32x2"]
    assert sorted(tasks) == sorted(f"layer{i}.{t}" for i in (0, 1)
                                   for t in ("up", "down", "reduce"))
    assert all(t["tiles"] > 0 for t in tasks.values())
    for r in (0, 1):
        assert (tmp_path / f"mk_16x16x16x32x2_rank{r}.json").exists()


def test_bench_megakernel_leaves_out_a_config_that_fails_to_build(tmp_path):
    # 24-wide tiles are refused by add_tp_mlp (not a power of two): reported, the other
    # configuration timed, on both ranks
    out = subprocess.run([sys.executable, "-m", "ditron", "bench", "megakernel", "--smoke",
                          "--world-size", "2", "--blocks", "16x24x16x32x2,16x16x16x32x2",
                          "--out", str(tmp_path / "new" / "mk.json")],  # its folder is made
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    row = json.loads((tmp_path / "new" / "mk.json").read_text())
    assert list(row["failed"]) == ["16x24x16x32x2"]
    assert "block_n must be a power of two" in row["failed"]["16x24x16x32x2"]
    assert "megakernel_16x24x16x32x2: not timed, its build failed" in out.stdout
    assert row["batch1"]["megakernel_16x16x16x32x2"] > 0
    assert "megakernel_16x24x16x32x2" not in row["batch1"]


@pytest.mark.skipif(torch.cuda.is_available(), reason="a GPU is visible")
@pytest.mark.parametrize("name", ["tp_mlp", "megakernel", "moe"])
def test_gpu_benchmarks_without_a_gpu_are_usage_errors(name, capsys):
    """The benchmarks that time GPUs refuse to start without one, before any rank starts
    (their ranks raised "no CUDA device is visible", each with a traceback)."""
    module = importlib.import_module(f"ditron.benchmarks.{name}")
    with pytest.raises(SystemExit) as info:
        module.main(["--world-size", "2"])
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert "no CUDA device is visible: it times GPUs (--smoke runs tiny shapes" in err, err


@pytest.mark.skipif(torch.cuda.is_available(), reason="a GPU is visible")
@pytest.mark.parametrize("command", [["demo"], ["trace"], ["bench", "collectives"],
                                     ["bench", "tp-gemm"]])
def test_cuda_backend_without_a_gpu_is_a_usage_error(command):
    """``--backend cuda`` with no GPU stops before any rank starts, in one line (the ranks
    each raised with a traceback; bench tp-gemm divided by zero GPUs)."""
    out = _main(*command, "--backend", "cuda")
    assert out.returncode == 2, (out.stdout, out.stderr)
    assert "no CUDA device is visible" in out.stderr and "Traceback" not in out.stderr, \
        out.stderr
    assert out.stdout == "", out.stdout  # the demo printed its first line before


@pytest.mark.skipif(torch.cuda.is_available(), reason="a GPU is visible")
def test_launch_on_cuda_without_a_gpu_raises_before_any_rank_starts():
    import ditron
    from ditron.runtime.config import SettingsError

    with pytest.raises(SettingsError, match="backend 'cuda' but no CUDA device is visible"):
        ditron.launch(print, 2, backend="cuda")


def _not_json(constant: str):
    """``json.loads``' hook for ``NaN`` / ``Infinity``: strict readers refuse them."""
    raise ValueError(f"not JSON: {constant}")


def test_benchmark_json_is_strict(tmp_path):
    """A NaN in a benchmark's results (``max_rel_err`` when the op wrote NaN) went into its
    JSON as ``NaN``, which only Python reads back; now the string ``"nan"``."""
    script = tmp_path / "nan_wgrad.py"
    script.write_text(
        "import ditron.benchmarks.moe as moe\n"
        "def wgrad(x, dy, offsets, out=None, config=None):\n"
        "    return out.fill_(float('nan'))\n"
        "moe.grouped_gemm_wgrad = wgrad\n"
        "if __name__ == '__main__':\n"
        f"    moe.main(['--smoke', '--parts', 'wgrad', '--out', {str(tmp_path / 'w.json')!r}])\n")
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stderr
    (row,) = json.loads((tmp_path / "w.json").read_text(), parse_constant=_not_json)["rows"]
    assert row["max_rel_err"] == "nan"
    assert row["ditron"] > 0


def test_write_json_keeps_every_field(tmp_path):
    from ditron.benchmarks import write_json

    value = {"t": 1.5, "bad": [float("nan"), float("inf"), -float("inf")], "n": None,
             "nested": {"x": (1, float("nan"))}, "s": "ok", "b": True}
    write_json(str(tmp_path / "r.json"), value)
    assert json.loads((tmp_path / "r.json").read_text(), parse_constant=_not_json) == {
        "t": 1.5, "bad": ["nan", "inf", "-inf"], "n": None, "nested": {"x": [1, "nan"]},
        "s": "ok", "b": True}
