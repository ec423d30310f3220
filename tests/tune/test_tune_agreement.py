"""``tune.tuner.tune`` is collective: ranks that call it differently (one refusing its own
arguments, valid arguments that differ, a ``DITRON_TUNE_MARGIN`` that does not read) raise
on every rank before anything is timed, instead of one rank raising while the others wait
in the first timing barrier, or the ranks timing different calls and caching rank 0's."""

from __future__ import annotations

import pytest
import torch

import ditron


def _tune_as(cache_dir: str, mine: dict, env: dict) -> tuple[str, int]:
    """``tune`` with rank 1's arguments changed by ``mine`` and its environment by ``env``
    (every rank's where ``env`` has the key ``"all"``): the error this rank raised (type and
    first line) or ``"returned"``, and how many timings ran."""
    import os

    from ditron.tune import tuner

    os.environ["DITRON_CACHE_DIR"] = cache_dir
    rank = ditron.world().rank
    every = env.pop("all", False)
    if rank == 1 or every:
        os.environ.update(env)
    args = {"op": "gemm_rs", "M": 8, "N": 8, "K": 8, "dtype": torch.float32, "warmup": 0,
            "iters": 1, **(mine if rank == 1 else {})}
    timed = []
    time_calls = tuner.time_calls
    tuner.time_calls = lambda *a, **k: timed.append(1) or time_calls(*a, **k)
    try:
        tuner.tune(args.pop("op"), args.pop("M"), args.pop("N"), args.pop("K"),
                   progress=False, **args)
    except Exception as exc:  # noqa: BLE001 - the test compares what each rank saw
        return f"{type(exc).__name__}: {str(exc).splitlines()[0]}", len(timed)
    return "returned", len(timed)


def test_a_rank_refusing_its_arguments_fails_every_rank(tmp_path, monkeypatch):
    """Rank 1's ``M`` does not split over the ranks: it raised alone, and rank 0 waited in
    the first timing's barrier until the launch timed out (under torchrun, for ever)."""
    monkeypatch.setenv("DITRON_LAUNCH_TIMEOUT", "40")  # the old hang, short
    got = ditron.launch(_tune_as, 2, str(tmp_path), {"M": 9}, {}, backend="cpu")
    assert got == [("ValueError: tune: a rank refused the call's arguments:", 0),
                   ("ValueError: tune: gemm_rs splits M = 9 rows over 2 ranks; M must "
                    "divide by 2", 0)]


@pytest.mark.parametrize("mine", [{"layout": "n"}, {"M": 16}, {"dtype": torch.float16},
                                  {"iters": 2}])
def test_ranks_tuning_different_calls_fail_before_timing(tmp_path, mine):
    """Valid arguments that differ: with ``b`` laid out differently the ranks timed
    different calls and rank 0 cached its layout's decision from them; with different
    shapes or dtypes every candidate failed in the ops' own agreement (and the trial lists
    could differ in length, a hang); with different counts the ranks' collectives no
    longer paired up."""
    got = ditron.launch(_tune_as, 2, str(tmp_path), mine, {}, backend="cpu")
    field = next(iter(mine))
    assert got == [(f"ValueError: tune: ranks disagree on the call ({field} differs):",
                    0)] * 2
    assert not list(tmp_path.iterdir()), "a decision was cached"


def test_a_bad_margin_is_refused_before_timing(tmp_path, monkeypatch):
    """``DITRON_TUNE_MARGIN`` was read after the first pass (minutes of timing on GPUs),
    and where it did not read on one rank only, that rank raised alone, the others waiting
    in its collectives; a margin that differs between ranks made them choose differently."""
    monkeypatch.setenv("DITRON_LAUNCH_TIMEOUT", "40")  # the old hang, short
    bad = "SettingsError: DITRON_TUNE_MARGIN must be a number, got 'two percent'"
    got = ditron.launch(_tune_as, 2, str(tmp_path), {}, {"all": True,
                                                         "DITRON_TUNE_MARGIN": "two percent"},
                        backend="cpu")
    assert got == [(bad, 0)] * 2
    got = ditron.launch(_tune_as, 2, str(tmp_path), {}, {"DITRON_TUNE_MARGIN": "two percent"},
                        backend="cpu")
    assert got == [("ValueError: tune: a rank refused the call's arguments:", 0), (bad, 0)]
    got = ditron.launch(_tune_as, 2, str(tmp_path), {}, {"DITRON_TUNE_MARGIN": "0.5"},
                        backend="cpu")
    assert got == [("ValueError: tune: ranks disagree on the call (margin differs):", 0)] * 2
