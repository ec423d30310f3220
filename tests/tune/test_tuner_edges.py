"""Edges of what the tuner keys and reads: decisions timed in debug mode on a GPU (a device
synchronize after every overlapped launch, host gathers per call, neither paid by the
fallback) are kept apart from unchecked ones; a ``DITRON_TUNE_MARGIN`` no candidate could
beat is refused on every rank before anything is timed."""

from __future__ import annotations

import types

import pytest
import torch

import ditron
from ditron.tune import cache, decisions

from .counted_tuning import tune_counting


def _runtime(device: str, wait_timeout: float, check_calls: bool) -> types.SimpleNamespace:
    """What ``key_for`` asks of the runtime: one GPU (or the CPU) per rank on one node."""
    world = types.SimpleNamespace(device=torch.device(device), local_world_size=2,
                                  world_size=2)
    return types.SimpleNamespace(world=world, wait_timeout=wait_timeout,
                                 settings=types.SimpleNamespace(check_calls=check_calls),
                                 backend=types.SimpleNamespace(shares_devices=lambda n: False))


@pytest.mark.parametrize("device", ["cuda", "cpu"])
def test_decisions_timed_with_checked_calls_are_kept_apart(device, monkeypatch):
    """On a GPU with a wait timeout every overlapped launch ends in a device synchronize
    (``check_waits``) and ``DITRON_CHECK_CALLS`` adds host gathers per call, which the
    fallback does not pay: a decision tuned in debug mode (likely the fallback) shared the
    key of unchecked runs and cost them their overlap. The CPU backend checks every launch
    whatever the settings: its keys stay as they were."""
    from ditron.runtime import world

    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: "NVIDIA H200")
    monkeypatch.setattr(world, "is_initialized", lambda: True)
    keys = {}
    for timeout, check in ((0.0, False), (30.0, False), (0.0, True), (30.0, True)):
        monkeypatch.setattr(world, "current", lambda t=timeout, c=check: _runtime(device, t, c))
        keys[timeout, check] = (decisions.key_for("gemm_rs", 64, 32, 16, torch.bfloat16, 2),
                                decisions.key_for("ag_gemm", 64, 32, 16, torch.bfloat16, 2,
                                                  "n", scalar=True))
    name = "NVIDIA H200" if device == "cuda" else "cpu"
    plain = (f"gemm_rs|64x32x16|bfloat16|w2|{name}{cache.versions()}",
             f"ag_gemm|64x32x16|bfloat16|w2|{name}|b row-major, scalar loads"
             f"{cache.versions()}")
    assert keys[0.0, False] == plain  # unchecked keys are the ones cached before
    if device == "cpu":
        assert set(keys.values()) == {plain}
        return
    checked = (f"gemm_rs|64x32x16|bfloat16|w2|{name}|checked calls{cache.versions()}",
               f"ag_gemm|64x32x16|bfloat16|w2|{name}|b row-major, scalar loads, checked "
               f"calls{cache.versions()}")
    assert keys[30.0, False] == keys[0.0, True] == keys[30.0, True] == checked


@pytest.mark.parametrize("margin", ["1", "2", "5"])
def test_a_margin_no_candidate_could_beat_is_refused(tmp_path, margin):
    """``DITRON_TUNE_MARGIN=2`` (meant as 2%) asks overlap to take at most ``1 - 2`` times
    the fallback's time: the tuner timed every candidate, chose the fallback for every
    shape and cached it, with no word of why."""
    got = ditron.launch(tune_counting, 2, str(tmp_path), {"DITRON_TUNE_MARGIN": margin},
                        backend="cpu")
    assert got == [(f"SettingsError: DITRON_TUNE_MARGIN must be a fraction below 1 (0.05 "
                    f"for 5%), got '{margin}': no overlapped candidate could win", 0)] * 2
    assert not list(tmp_path.iterdir()), "a decision was cached"


def _tune_in_graph_safe(cache_dir: str, ranks: tuple[int, ...]) -> tuple[str, int]:
    """``tune`` called inside ``ditron.ops.graph_safe()`` on ``ranks``: the error (type,
    first line) or the method chosen, and how many timings ran."""
    import contextlib
    import os

    from ditron.ops import graph_safe
    from ditron.tune import tuner

    os.environ["DITRON_CACHE_DIR"] = cache_dir
    timed = []
    time_calls = tuner.time_calls
    tuner.time_calls = lambda *a, **k: timed.append(1) or time_calls(*a, **k)
    inside = ditron.world().rank in ranks
    try:
        with graph_safe() if inside else contextlib.nullcontext():
            decision = tuner.tune("gemm_rs", 8, 8, 8, torch.float32, warmup=0, iters=1,
                                  progress=False)
    except Exception as exc:  # noqa: BLE001 - the test compares what each rank saw
        return f"{type(exc).__name__}: {str(exc).splitlines()[0]}", len(timed)
    return decision.method, len(timed)


def test_tuning_in_graph_mode_is_refused_on_every_rank(tmp_path):
    """Inside ``graph_safe()`` (the warm-up before a capture) every trial ran the ops'
    graph-safe variants, and their times were cached as the eager decision (inside a
    capture, on GPUs, the tuner's synchronizes broke it). Refused before anything is
    timed, on every rank, also where one rank alone is in graph mode."""
    refused = ("RuntimeError: tune: cannot time inside a CUDA graph capture or "
               "ditron.ops.graph_safe() (the ops run their graph-safe variants there, and a "
               "capture cannot synchronize); tune before capturing")
    got = ditron.launch(_tune_in_graph_safe, 2, str(tmp_path), (0, 1), backend="cpu")
    assert got == [(refused, 0)] * 2
    got = ditron.launch(_tune_in_graph_safe, 2, str(tmp_path), (1,), backend="cpu")
    assert got == [("ValueError: tune: a rank refused the call's arguments:", 0),
                   (refused, 0)]
    assert not list(tmp_path.iterdir()), "a decision was cached"


class _Unwritable:
    """A stderr that cannot be written: closed (``ValueError``), or a pipe whose reader has
    gone (``BrokenPipeError``: ``tee`` killed); a terminal or not."""

    def __init__(self, error: Exception, tty: bool) -> None:
        self.error, self.tty = error, tty

    def isatty(self) -> bool:
        return self.tty

    def write(self, text: str) -> int:
        raise self.error

    def flush(self) -> None:
        raise self.error


def _tune_without_stderr(how: str, tty: bool) -> tuple[str, str]:
    """``tune`` with rank 0's stderr ``how`` ("closed", "broken", "none"), a terminal where
    ``tty``, its calls and timings stubbed: the method chosen (or the error), and what went
    to stdout."""
    import io
    import sys

    from ditron.tune import tuner

    tuner._call = lambda fn_op, a, b, op, trial: None
    tuner.time_calls = lambda fn, warmup, iters, dev, batch=1: [10.0] * iters
    errors = {"closed": ValueError("I/O operation on closed file."),
              "broken": BrokenPipeError(32, "Broken pipe")}
    out = sys.stdout = io.StringIO()
    if ditron.world().rank == 0:
        sys.stderr = _Unwritable(errors[how], tty) if how in errors else None
    try:
        decision = tuner.tune("gemm_rs", 32, 8, 8, torch.float32, warmup=0, iters=1,
                              save=False)
    except Exception as exc:  # noqa: BLE001 - the test compares what each rank saw
        return f"{type(exc).__name__}: {exc}", out.getvalue()
    finally:
        sys.stderr, sys.stdout = sys.__stderr__, sys.__stdout__
    return decision.method, out.getvalue()


@pytest.mark.parametrize(("how", "tty"), [("closed", False), ("closed", True),
                                          ("broken", False), ("broken", True),
                                          ("none", False)])
def test_a_stderr_that_cannot_take_the_progress_does_not_stop_rank_0(how, tty, monkeypatch):
    """Rank 0 prints its progress on stderr: where that was closed or a pipe whose reader
    had gone, rank 0 raised out of ``tune`` (``ValueError: I/O operation on closed
    file``, ``BrokenPipeError``) while its peers waited in its next collective (under
    torchrun, until the host group's timeout); where it was ``None``, the progress went to
    stdout. The output stops; the tuning goes on, and every rank gets the decision."""
    monkeypatch.setenv("DITRON_LAUNCH_TIMEOUT", "30")  # the old hang, short
    got = ditron.launch(_tune_without_stderr, 2, how, tty, backend="cpu")
    assert got[0] == got[1] and got[0][0] in ("overlap", "fallback"), got
    assert got[0][1] == "", "the progress went to stdout"


def _tune_mlp_with_margin(cache_dir: str) -> str:
    """``tune_mlp`` with ``DITRON_TUNE_MARGIN=2``: the error (type, first line)."""
    import os

    from ditron.task.tp_mlp_tuner import tune_mlp

    os.environ["DITRON_CACHE_DIR"] = cache_dir
    os.environ["DITRON_TUNE_MARGIN"] = "2"
    with pytest.raises(ValueError) as info:
        tune_mlp(8, 16, 32, torch.float32, warmup=0, iters=1, progress=False)
    return f"{type(info.value).__name__}: {str(info.value).splitlines()[0]}"


def test_the_mlp_tuner_refuses_the_margin_as_the_gemm_tuner_does(tmp_path):
    # before: tune_mlp read the margin on its own and took 2 (meant as 2%) as 200%
    got = ditron.launch(_tune_mlp_with_margin, 2, str(tmp_path), backend="cpu")
    assert got == ["SettingsError: DITRON_TUNE_MARGIN must be a fraction below 1 (0.05 for "
                   "5%), got '2': no overlapped candidate could win"] * 2
    assert not (tmp_path / "tune.json").exists()
