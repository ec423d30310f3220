"""Settings: ``docs/settings.md`` names exactly the ``DITRON_*`` variables the code reads,
and on/off variables read one way, whatever their default."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]
NAME = re.compile(r"DITRON_[A-Z0-9_]*[A-Z0-9]")


def _names(paths) -> set[str]:
    return {n for p in paths for n in NAME.findall(p.read_text())}


def test_settings_page_names_every_variable_the_code_reads():
    code = _names([*(ROOT / "ditron").rglob("*.py"), *(ROOT / "tools").glob("*.py")])
    page = _names([ROOT / "docs" / "settings.md"])
    assert code - page == set(), f"read by the code, missing from docs/settings.md: {code - page}"
    # the page's per-op engine variables are spelled out from DITRON_<OP>_ENGINE
    per_op = {f"DITRON_{op.upper()}_ENGINE"
              for op in ("all_reduce", "all_gather", "reduce_scatter", "all_to_all")}
    assert page - code - per_op == set(), f"on the page, read by nothing: {page - code - per_op}"


@pytest.mark.parametrize("value, off_default, on_default",
                         [(None, False, True), ("", False, True), ("1", True, True),
                          ("yes", True, True), ("0", False, False), ("false", False, False),
                          (" OFF ", False, False), ("no", False, False)])
def test_env_flag_defaults(value, off_default, on_default, monkeypatch):
    from ditron.runtime.config import env_flag

    if value is None:
        monkeypatch.delenv("DITRON_SOME_FLAG", raising=False)
    else:
        monkeypatch.setenv("DITRON_SOME_FLAG", value)
    assert env_flag("DITRON_SOME_FLAG") is off_default
    assert env_flag("DITRON_SOME_FLAG", True) is on_default


def test_default_on_switches_turn_off_one_way(monkeypatch):
    # the experiment switches that default to on: "false" turns them off as "0" does
    from ditron.runtime import triton_launch

    monkeypatch.setenv("DITRON_FAST_LAUNCH", "false")
    kernel = triton_launch.FastKernel.__new__(triton_launch.FastKernel)
    kernel._params = [object()]
    assert kernel._enabled() is False


@pytest.mark.parametrize("var, value, words", [
    ("DITRON_WAIT_TIMEOUT", "30s", "DITRON_WAIT_TIMEOUT must be a number of seconds"),
    ("DITRON_WAIT_TIMEOUT", "-5", "DITRON_WAIT_TIMEOUT must be a number of seconds in [0, "),
    ("DITRON_WAIT_TIMEOUT", "nan", "DITRON_WAIT_TIMEOUT"),
    # infinite or huge: once an OverflowError from timedelta or the selectors, unnamed
    ("DITRON_WAIT_TIMEOUT", "inf", "DITRON_WAIT_TIMEOUT must be a number of seconds in [0, "),
    ("DITRON_LAUNCH_TIMEOUT", "1e9", "DITRON_LAUNCH_TIMEOUT must be a number of seconds in"),
    ("DITRON_LAUNCH_TIMEOUT", "-1", "DITRON_LAUNCH_TIMEOUT must be a number of seconds"),
    ("DITRON_HEAP_SIZE", "1e30", "DITRON_HEAP_SIZE: byte count '1e30' is too large"),
    ("DITRON_LOCAL_WORLD_SIZE", "0", "DITRON_LOCAL_WORLD_SIZE must be a positive int"),
    ("DITRON_LOCAL_WORLD_SIZE", "two", "DITRON_LOCAL_WORLD_SIZE must be a positive int"),
    ("DITRON_HEAP_SIZE", "inf", "DITRON_HEAP_SIZE: cannot read a byte count"),
    ("DITRON_HEAP_SIZE", "0", "DITRON_HEAP_SIZE: byte count must be positive"),
])
def test_malformed_variable_is_named(var, value, words, monkeypatch):
    """A bad ``DITRON_*`` value raises naming the variable (before: Python's own "could not
    convert string to float: '30s'", or a negative timeout silently meaning "forever")."""
    from ditron.runtime.config import Settings

    monkeypatch.setenv(var, value)
    with pytest.raises(ValueError, match=re.escape(words)):
        Settings.from_env("cpu")


@pytest.mark.parametrize("keyword, value", [
    ("wait_timeout", -1), ("heap_size", 0), ("heap_size", 1.5e9), ("local_world_size", 2.5),
    ("local_world_size", True), ("local_world_size", 0)])
def test_malformed_init_keyword_is_named(keyword, value):
    from ditron.runtime.config import Settings

    with pytest.raises(ValueError, match=re.escape(f"ditron.init({keyword}=...)")):
        Settings.from_env("cpu", **{keyword: value})


def test_settings_read_from_variables_and_keywords(monkeypatch):
    from ditron.runtime.config import Settings

    monkeypatch.setenv("DITRON_HEAP_SIZE", "64MiB")
    monkeypatch.setenv("DITRON_WAIT_TIMEOUT", "2.5")
    monkeypatch.setenv("DITRON_LOCAL_WORLD_SIZE", "2")
    monkeypatch.setenv("DITRON_LAUNCH_TIMEOUT", "")  # empty: the default
    s = Settings.from_env("cpu")
    assert (s.heap_size, s.wait_timeout, s.local_world_size, s.launch_timeout) == \
        (64 << 20, 2.5, 2, 0.0)
    s = Settings.from_env("cpu", heap_size="1G", wait_timeout=0, local_world_size=4)
    assert (s.heap_size, s.wait_timeout, s.local_world_size) == (1 << 30, 0.0, 4)


@pytest.mark.parametrize(("value", "timeout", "checks"), [
    ("", "120", True), ("", "0", False), ("0", "120", False), ("1", "0", True)])
def test_every_call_is_checked_in_debug_mode_unless_told(value, timeout, checks, monkeypatch):
    """``DITRON_CHECK_CALLS`` unset: on where waits time out (debug mode, the CPU
    backend's default), so that a rank refusing a repeated call's arguments tells its
    peers; either value given wins."""
    from ditron.runtime.config import Settings

    monkeypatch.setenv("DITRON_CHECK_CALLS", value)
    monkeypatch.setenv("DITRON_WAIT_TIMEOUT", timeout)
    assert Settings.from_env("cpu").check_calls is checks
    monkeypatch.delenv("DITRON_WAIT_TIMEOUT")
    assert Settings.from_env("cpu").check_calls is (checks if value else True)  # cpu: 120 s
    assert Settings.from_env("cpu", wait_timeout=float(timeout)).check_calls is checks


@pytest.mark.parametrize("var, value, words", [
    ("DITRON_FUSED_BLOCK", "4k", "DITRON_FUSED_BLOCK must be an integer >= 0, got '4k'"),
    ("DITRON_PULL_CHUNK_BYTES", "-1", "DITRON_PULL_CHUNK_BYTES: byte count must be positive"),
    ("DITRON_TUNE_MARGIN", "5%", "DITRON_TUNE_MARGIN must be a number, got '5%'"),
    ("DITRON_GEMM_BLOCKS", "64x128", "DITRON_GEMM_BLOCKS must be BMxBNxBK"),
    ("DITRON_GEMM_BLOCKS", "64x100x32", "block_n must be a power of two"),
    ("DITRON_FUSED_PUSH", "push", "DITRON_FUSED_PUSH must be 0 or 1 (or off / on), got 'push'"),
    ("DITRON_GEMM_TMA", "2", "DITRON_GEMM_TMA must be 0 or 1 (or off / on), got '2'"),
])
def test_malformed_experiment_knob_is_named(var, value, words, monkeypatch):
    """The experiments' knobs, read where they are used: a bad value names the variable
    (before: Python's "invalid literal for int() with base 10: '4k'")."""
    from ditron.kernels import gemm
    from ditron.kernels.descriptors import tma_wanted
    from ditron.ops import chunked_exchanges, fused_launch
    from ditron.runtime.config import env_float

    monkeypatch.setenv(var, value)
    read = {"DITRON_FUSED_BLOCK": lambda: fused_launch.fused_variant(1 << 20, "cuda"),
            "DITRON_PULL_CHUNK_BYTES": lambda: chunked_exchanges.chunk_bounds(1 << 20, 2),
            "DITRON_TUNE_MARGIN": lambda: env_float("DITRON_TUNE_MARGIN", 0.02),
            "DITRON_GEMM_BLOCKS": lambda: gemm._default_config(
                torch.device("cpu"), torch.float32, value, "plain"),
            "DITRON_FUSED_PUSH": lambda: fused_launch.fused_variant(1 << 20, "cpu"),
            "DITRON_GEMM_TMA": lambda: tma_wanted(torch.device("cpu"))}[var]
    with pytest.raises(ValueError, match=re.escape(words)):
        read()


@pytest.mark.parametrize("value, forced", [("", None), ("1", True), ("TRUE", True),
                                           ("on", True), ("0", False), ("no", False)])
def test_switches_force_either_way_or_leave_the_default(value, forced, monkeypatch):
    """``DITRON_GEMM_TMA`` and ``DITRON_FUSED_PUSH`` take on/off spellings both ways (``true``
    was ignored, or meant pull); unset or empty leaves the op's default."""
    from ditron.kernels.descriptors import tma_wanted
    from ditron.ops import fused_launch
    from ditron.runtime.config import env_switch

    monkeypatch.setenv("DITRON_GEMM_TMA", value)
    monkeypatch.setenv("DITRON_FUSED_PUSH", value)
    assert env_switch("DITRON_GEMM_TMA") is forced
    assert tma_wanted(torch.device("cpu")) is bool(forced)  # the CPU default is off
    assert fused_launch.fused_variant(1 << 20, "cpu").push is bool(forced)
    if forced is not None:  # on CUDA the default for 8 MB is a push
        assert fused_launch.fused_variant(8 << 20, "cuda", sms=132).push is forced


def _init_again() -> list[str]:
    """``ditron.init`` inside a launched rank (its world exists): no keywords, or the
    world's own settings, return it; other settings or bad values raise."""
    import ditron
    from ditron.runtime.world import current

    rt = current()
    w = ditron.init()
    assert ditron.init(heap_size=rt.settings.heap_size, wait_timeout=rt.wait_timeout) is w
    seen = []
    for kw in ({"heap_size": "1M"}, {"wait_timeout": 3, "local_world_size": 1},
               {"heap_size": -5}):
        with pytest.raises((RuntimeError, ValueError)) as info:  # ValueError: a bad value
            ditron.init(**kw)
        seen.append(str(info.value))
    return seen


def test_init_keywords_for_an_existing_world_are_checked(monkeypatch):
    """They were ignored: ``init(heap_size="1M")`` in a rank returned the 1 GiB world."""
    import ditron

    monkeypatch.setenv("DITRON_WAIT_TIMEOUT", "20")
    seen = ditron.launch(_init_again, 2, backend="cpu")[0]
    assert "asked for heap_size=1048576 (the world has" in seen[0]
    assert "wait_timeout=3.0 (the world has 20.0), local_world_size=1 (the world has 2)" \
        in seen[1]
    assert "ditron.init(heap_size=...)" in seen[2]


def test_bad_backend_variable_is_reported_where_a_backend_is_needed(tmp_path):
    """``DITRON_BACKEND=bogus`` raised at ``import ditron``: the CLI, which reports bad
    settings as one line and exit code 2, printed a traceback instead. The import succeeds
    now; the CLI reports the variable, and ``launch`` raises ``SettingsError`` naming it."""
    import os
    import subprocess
    import sys

    env = {**os.environ, "DITRON_BACKEND": "bogus"}
    cli = subprocess.run([sys.executable, "-m", "ditron", "demo", "--world-size", "2"],
                         capture_output=True, text=True, timeout=300, env=env)
    assert cli.returncode == 2, cli.stderr
    assert cli.stderr.startswith("ditron: DITRON_BACKEND: unknown backend 'bogus'"), cli.stderr
    assert "Traceback" not in cli.stderr
    script = tmp_path / "job.py"
    script.write_text("import ditron\n\n\ndef f():\n    return 1\n\n\n"
                      "if __name__ == '__main__':\n"
                      "    try:\n        ditron.launch(f, 2)\n"
                      "    except ditron.runtime.config.SettingsError as e:\n"
                      "        print(e)\n")
    job = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                         timeout=300, env=env)
    assert job.stdout.startswith("DITRON_BACKEND: unknown backend 'bogus'"), job.stderr


def _engine_errors() -> list[str]:
    import ditron

    x = torch.ones(4)
    got = []
    for call in (lambda: ditron.ops.all_reduce(x), lambda: ditron.ops.all_gather(x),
                 lambda: ditron.ops.ag_gemm(torch.ones(2, 3), torch.ones(3, 2)),
                 lambda: ditron.ops.gemm_rs(torch.ones(2, 3), torch.ones(3, 2))):
        try:
            call()
            got.append("ran")
        except ValueError as e:
            got.append(str(e).split(": ", 1)[1])
    return got


def test_bad_engine_variables_are_named(monkeypatch):
    """An engine name from the environment was reported as if the caller had passed it
    (``unknown engine 'copy'``): the error now names the variable it came from."""
    import ditron

    for var, value in (("DITRON_ENGINE", "copy"), ("DITRON_ALL_REDUCE_ENGINE", "push"),
                       ("DITRON_AG_ENGINE", "dma"), ("DITRON_RS_ENGINE", "pull")):
        monkeypatch.setenv(var, value)
    got = ditron.launch(_engine_errors, 1, backend="cpu")[0]
    assert got[0].startswith("unknown engine 'push' (from DITRON_ALL_REDUCE_ENGINE)"), got
    assert got[1].startswith("unknown engine 'copy' (from DITRON_ENGINE)"), got
    assert got[2].endswith("got 'dma' (from DITRON_AG_ENGINE)"), got
    assert got[3].endswith("got 'pull' (from DITRON_RS_ENGINE)"), got
