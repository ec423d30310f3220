"""``task.tp_mlp_tuner.tune_mlp`` is collective: ranks that call it differently (one
refusing its own arguments, valid arguments that differ, a ``DITRON_TUNE_MARGIN`` that does
not read or differs) raise on every rank before any candidate is built or timed, instead of
one rank raising while the others wait in the first build's agreement, or the ranks timing
different megakernel calls (a hang) or choosing differently. What rank 0 prints while it
tunes suits where it goes, as ``tune``'s does (``tests/tune/test_tune_progress.py``)."""

from __future__ import annotations

from itertools import pairwise

import pytest
import torch

import ditron
from ditron.task.tp_mlp import MlpBlocks
from tests.tune.test_tune_progress import Stderr


def _tune_as(cache_dir: str, mine: dict, env: dict) -> tuple[str, int]:
    """``tune_mlp`` with rank 1's arguments changed by ``mine`` and its environment by
    ``env`` (every rank's where ``env`` has the key ``"all"``): the error this rank raised
    (type and first line) or ``"returned"``, and how many candidates were built."""
    import os

    from ditron.task import tp_mlp_tuner

    os.environ["DITRON_CACHE_DIR"] = cache_dir
    rank = ditron.world().rank
    every = env.pop("all", False)
    if rank == 1 or every:
        os.environ.update(env)
    args = {"tokens": 4, "hidden": 16, "ffn": 32, "dtype": torch.float32, "layers": 1,
            "configs": [MlpBlocks(16, 16, 16, 16, 1), MlpBlocks(16, 16, 16, 16, 2)],
            "warmup": 0, "iters": 1, **(mine if rank == 1 else {})}
    built = []
    build = tp_mlp_tuner._build
    tp_mlp_tuner._build = lambda *a, **k: built.append(1) or build(*a, **k)
    try:
        tp_mlp_tuner.tune_mlp(args.pop("tokens"), args.pop("hidden"), args.pop("ffn"),
                              progress=False, **args)
    except Exception as exc:  # noqa: BLE001 - the test compares what each rank saw
        return f"{type(exc).__name__}: {str(exc).splitlines()[0]}", len(built)
    return "returned", len(built)


def test_a_rank_refusing_its_arguments_fails_every_rank(tmp_path, monkeypatch):
    """Rank 1's ``ffn`` does not split over the ranks: it raised alone, and rank 0 waited
    in the first candidate's ``add_tp_mlp`` agreement (until the launch ended it, or a
    gloo error once rank 1's process exited)."""
    monkeypatch.setenv("DITRON_LAUNCH_TIMEOUT", "40")  # the old hang, short
    got = ditron.launch(_tune_as, 2, str(tmp_path), {"ffn": 33}, {}, backend="cpu")
    assert got == [("ValueError: tune_mlp: a rank refused the call's arguments:", 0),
                   ("ValueError: tune_mlp: ffn 33 does not divide by the world size 2", 0)]


@pytest.mark.parametrize("mine", [{"tokens": 8}, {"layers": 2}, {"dtype": torch.float16},
                                  {"iters": 7}, {"warmup": 2}, {"batch": 2},
                                  {"programs": 2},
                                  {"configs": [MlpBlocks(16, 16, 16, 16, 2)]}])
def test_ranks_tuning_different_calls_fail_before_building(tmp_path, monkeypatch, mine):
    """Valid arguments that differ: with other shapes, layers or dtypes every candidate
    failed in ``add_tp_mlp``'s or the compile's agreement ("every candidate failed"); with
    other counts, or candidate lists of other lengths, the ranks made different numbers of
    megakernel calls and barriers, and hung."""
    monkeypatch.setenv("DITRON_LAUNCH_TIMEOUT", "40")  # the old hangs, short
    got = ditron.launch(_tune_as, 2, str(tmp_path), mine, {}, backend="cpu")
    field = next(iter(mine))
    assert got == [(f"ValueError: tune_mlp: ranks disagree on the call ({field} differs):",
                    0)] * 2
    assert not list(tmp_path.iterdir()), "a choice was cached, or a kernel generated"


def test_a_bad_or_differing_margin_is_refused_before_building(tmp_path, monkeypatch):
    """``DITRON_TUNE_MARGIN`` was read after every candidate had been built and timed: one
    that did not read on every rank raised there, leaving every candidate's inbox and
    scoreboard allocated; on one rank only, that rank raised alone while the others waited
    to free them; a margin that differs made the ranks return different tiles."""
    monkeypatch.setenv("DITRON_LAUNCH_TIMEOUT", "40")  # the old hang, short
    bad = "SettingsError: DITRON_TUNE_MARGIN must be a number, got 'two percent'"
    got = ditron.launch(_tune_as, 2, str(tmp_path), {}, {"all": True,
                                                         "DITRON_TUNE_MARGIN": "two percent"},
                        backend="cpu")
    assert got == [(bad, 0)] * 2
    got = ditron.launch(_tune_as, 2, str(tmp_path), {}, {"DITRON_TUNE_MARGIN": "two percent"},
                        backend="cpu")
    assert got == [("ValueError: tune_mlp: a rank refused the call's arguments:", 0), (bad, 0)]
    got = ditron.launch(_tune_as, 2, str(tmp_path), {}, {"DITRON_TUNE_MARGIN": "0.5"},
                        backend="cpu")
    assert got == [("ValueError: tune_mlp: ranks disagree on the call (margin differs):",
                    0)] * 2


def _bad_arguments() -> list[tuple[str, int]]:
    """Each bad argument's error on this rank, and how many candidates were built."""
    from ditron.task import tp_mlp_tuner

    built = []
    build = tp_mlp_tuner._build
    tp_mlp_tuner._build = lambda *a, **k: built.append(1) or build(*a, **k)
    configs = [MlpBlocks(16, 16, 16, 16, 1)]
    got = []
    for kwargs in ({"warmup": -1}, {"iters": 0}, {"batch": 0}, {"programs": 0},
                   {"dtype": torch.int32}, {"configs": ["16x16x16x16x1"]},
                   {"configs": MlpBlocks()}):
        kwargs = {"dtype": torch.float32, "configs": configs, **kwargs}
        with pytest.raises(ValueError) as info:
            tp_mlp_tuner.tune_mlp(4, 16, 32, layers=1, progress=False, save=False, **kwargs)
        got.append((str(info.value).splitlines()[0], len(built)))
    return got


def test_bad_counts_dtypes_and_configs_are_refused_before_building():
    """A batch of 0 divided by zero after every candidate had been built (their inboxes
    and scoreboards left allocated); programs of 0, a dtype the tiles do not compute in
    and configurations that are no ``MlpBlocks`` made every candidate fail to build;
    a negative warm-up or no samples passed."""
    got = ditron.launch(_bad_arguments, 2, backend="cpu")
    assert got[0] == got[1]
    assert got[0] == [
        ("tune_mlp: warmup must be an int >= 0, got -1", 0),
        ("tune_mlp: iters must be a positive int, got 0", 0),
        ("tune_mlp: batch must be a positive int, got 0", 0),
        ("tune_mlp: programs must be a positive int, got 0", 0),
        ("tune_mlp: dtype must be one of torch.float16, torch.bfloat16, torch.float32 (the "
         "MLP's), got torch.int32", 0),
        ("tune_mlp: configs must be a list of MlpBlocks, got ['16x16x16x16x1']", 0),
        (f"tune_mlp: configs must be a list of MlpBlocks, got {MlpBlocks()!r}", 0)]


def _printed(tty: bool) -> str:
    """What rank 0 printed while tuning over candidates whose labels shrink (builds and
    timing stubbed: no megakernel runs)."""
    import sys

    from ditron.task import tp_mlp_tuner

    tp_mlp_tuner._build = lambda x, weights, blocks, programs, scratch, inbox: (lambda: None)
    tp_mlp_tuner.time_in_rounds = lambda fns, rounds, iters, warmup, dev, batch=1: {
        name: [10.0 + name] * iters for name in fns}
    configs = [MlpBlocks(16, 16, 16, 16, 1), MlpBlocks(128, 128, 64, 256, 4, 4, 8, True, 256),
               MlpBlocks(16, 16, 16, 16, 2), MlpBlocks(16, 32, 16, 32, 2, stages=2)]
    sys.stderr = out = Stderr(tty)
    try:
        tp_mlp_tuner.tune_mlp(4, 16, 32, torch.float32, layers=1, configs=configs, warmup=0,
                              iters=1, save=False, progress=ditron.world().rank == 0)
    finally:
        sys.stderr = sys.__stderr__
    return out.getvalue()


@pytest.mark.parametrize("tty", [True, False])
def test_the_status_line_suits_where_it_goes(tty):
    """The build status was rewritten with ``\\r`` and three spaces of padding: a shorter
    label after a longer one left the longer one's tail on a terminal, and a log got every
    build of the pass on one line."""
    text, quiet = ditron.launch(_printed, 2, tty, backend="cpu")
    assert quiet == ""  # rank 1 prints nothing
    status, _, summary = text.partition("\n[ditron tune]   ")
    assert "10.0 us  16x16x16x16x1  <-" in summary and "\r" not in summary
    if tty:
        steps = status.split("\r")[1:]
        assert len(steps) == 4 and len({len(s.rstrip()) for s in steps}) > 1, steps
        assert all(len(later) >= len(earlier) for earlier, later in pairwise(steps)), (
            "a rewrite left the end of a longer line behind")
    else:
        assert "\r" not in text
        assert [line.rsplit(" ", 1)[0] for line in status.splitlines()] == [
            f"[ditron tune] tp_mlp tokens=4 hidden=16 ffn=32: build {i}/4" for i in range(1, 5)]
