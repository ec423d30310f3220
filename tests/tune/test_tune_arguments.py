"""``tune.tuner.tune`` refuses bad arguments before it allocates or times anything (it
used to fail inside: an unknown op as an AttributeError, ``iters=0`` in the median of no
samples, an ``M`` that does not split over the ranks in the op's own check mid-tuning); it
ends alike on every rank; one rank times the fallback alone; its candidates keep to their
documented bounds."""

from __future__ import annotations

import pytest
import torch

import ditron


def _refusals(cache_dir: str) -> list[str]:
    import os

    from ditron.tune import tuner

    os.environ["DITRON_CACHE_DIR"] = cache_dir
    messages = []
    for kw in ({"op": "matmul"}, {"M": 0}, {"N": 2.5}, {"M": 33}, {"iters": 0},
               {"warmup": -1}, {"batch": True}, {"dtype": torch.int32}, {"candidates": []},
               {"candidates": [(16, 32, 16)]}):
        args = {"op": "gemm_rs", "M": 32, "N": 24, "K": 20, "dtype": torch.float32, **kw}
        with pytest.raises(ValueError) as info:
            tuner.tune(args.pop("op"), args.pop("M"), args.pop("N"), args.pop("K"),
                       progress=False, **args)
        messages.append(str(info.value))
    assert not os.listdir(cache_dir), "a refused call cached a decision"
    return messages


def test_tune_refuses_bad_arguments(tmp_path):
    wanted = ["tune: op must be one of ag_gemm, gemm_rs, gemm_ar, got 'matmul'",
              "tune: M must be a positive int, got 0",
              "tune: N must be a positive int, got 2.5",
              "tune: gemm_rs splits M = 33 rows over 2 ranks; M must divide by 2",
              "tune: iters must be a positive int, got 0",
              "tune: warmup must be an int >= 0, got -1",
              "tune: batch must be a positive int, got True",
              # every candidate failed in the op, and "fallback" with an infinite time was
              # cached (the ops take float16, bfloat16 and float32 only)
              "tune: dtype must be one of torch.float16, torch.bfloat16, torch.float32 (the "
              "ops' dtypes), got torch.int32",
              # said "no candidate tile config fits shared memory"; a tuple failed inside
              # with AttributeError
              "tune: candidates must be a non-empty list of GemmConfig, got []",
              "tune: candidates must be a non-empty list of GemmConfig, got [(16, 32, 16)]"]
    for messages in ditron.launch(_refusals, 2, str(tmp_path), backend="cpu"):
        assert messages == wanted


def _one_rank(cache_dir: str) -> tuple[str, int]:
    import os

    from ditron.tune import tuner

    os.environ["DITRON_CACHE_DIR"] = cache_dir
    os.environ["DITRON_TUNE_MARGIN"] = "-10"  # any overlapped candidate would win
    timed = []
    time_calls = tuner.time_calls
    tuner.time_calls = lambda fn, *args: timed.append(fn) or time_calls(fn, *args)
    decision = tuner.tune("gemm_ar", 8, 16, 16, torch.float32, warmup=0, iters=1,
                          progress=False)
    return decision.method, len(timed)


def test_one_rank_times_the_fallback_alone(tmp_path):
    """One rank has nothing to overlap (the ops fall back there whatever the decision):
    the tuner times the fallback only, in its two first-pass rounds, and chooses it. It
    used to time every candidate, each one the same fallback call, and could cache
    "overlap" for a call that never overlaps."""
    assert ditron.launch(_one_rank, 1, str(tmp_path), backend="cpu") == [("fallback", 2)]


def _unwritable(path: str) -> str:
    import os

    from ditron.tune import tuner

    os.environ["DITRON_CACHE_DIR"] = path
    try:
        tuner.tune("gemm_ar", 8, 16, 16, torch.float32, warmup=0, iters=1,
                   candidates=[tuner.CPU_CANDIDATES[0]], progress=False)
    except Exception as exc:  # noqa: BLE001 - the test compares what each rank saw
        return f"{type(exc).__name__}: {exc}"
    return "returned"


def test_a_decision_rank_0_cannot_write_fails_on_every_rank(tmp_path):
    """Rank 0 could not write the cache: it raised alone, while its peers returned the
    decision as if it were cached (or, under torchrun, waited in the closing barrier)."""
    (tmp_path / "file").write_text("")
    got = ditron.launch(_unwritable, 2, str(tmp_path / "file"), backend="cpu")
    assert got[0].startswith("CacheError: cannot write the tuning cache"), got[0]
    assert got[0].endswith("file is not a folder"), got[0]
    assert got[1] == "RuntimeError: tune: rank 0 could not write the decision to the cache"


def test_pulled_splits_keep_their_least_share(monkeypatch):
    """``split_rows_for`` tries splits whose smaller chunk holds at least ``SPLIT_LEAST`` of
    the segment; on a 5-row segment it tried (4, 1), one fifth (``int`` rounded the bound
    0.375 * 5 down before the ceiling to a step)."""
    from ditron.tune import tuner

    picked = {}
    for seg in (5, 13, 16, 40, 100):
        # any split is cheaper than two halves
        halves = {seg // 2, seg - seg // 2}
        monkeypatch.setattr(tuner, "_row_times", lambda a, b, rows, batch, h=halves: {
            m: 1.0 + (m in h) for m in rows | {0}})
        splits = picked[seg] = tuner.split_rows_for(None, None, seg)
        assert all(r >= tuner.SPLIT_LEAST * seg and big + r == seg for big, r in splits), (
            seg, splits)
    assert picked[40] == [(25, 15)] and picked[5] == [] and picked[16] == [(10, 6)]


def _confirming(failing: int) -> object:
    """``_confirm`` over three trials (the fallback, a fast one, one failing on rank 1 at
    its ``failing``-th call): the failing trial drops out on every rank, or, the fallback
    failing, every rank raises. Trials stand in for calls (``_call`` returns them)."""
    from ditron.tune import tuner

    me = ditron.world().rank
    calls = {0: 0, 1: 0, 2: 0}

    class StandIn:
        def __init__(self, j: int, us: float):
            self.j, self.us = j, us

        def label(self) -> str:
            return f"trial {self.j}"

        def __call__(self) -> list[float]:
            calls[self.j] += 1
            if me == 1 and self.j == failing and calls[self.j] >= 2:
                raise RuntimeError("out of memory")
            return [self.us] * 3

    tuner._call = lambda fn_op, a, b, op, t: t
    tuner.time_calls = lambda fn, warmup, iters, dev, batch: fn()
    trials = [StandIn(0, 100.0), StandIn(1, 50.0), StandIn(2, 10.0)]
    try:
        return tuner._confirm(trials, [1, 2], None, None, None, "gemm_rs", 1, 3,
                              torch.device("cpu"), 1, False)
    except RuntimeError as exc:
        return str(exc)


@pytest.mark.parametrize("world_size", [2, 3])
def test_a_trial_failing_while_confirmed_drops_out_on_every_rank(world_size):
    """A candidate that passed the first pass and then fails on one rank (it raised there
    alone, leaving the others in the next candidate's collectives)."""
    assert ditron.launch(_confirming, world_size, 2) == [1] * world_size
    res = ditron.launch(_confirming, world_size, 0)
    assert res == ["tune: the fallback (trial 0) failed while being confirmed, on some "
                   "rank"] * world_size, res
