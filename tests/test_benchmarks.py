"""The benchmarks' own logic (``ditron/benchmarks``), below the command line that
``test_cli.py`` runs: what they time, and that their ranks move what they say."""

from __future__ import annotations

import importlib
import json
import math
import time

import pytest
import torch

import ditron


def _a2a_received(tokens: int, topk: int) -> list[tuple[int, int, int]]:
    """``(rows sent, rows received, capacity)`` of every ``all_to_all_device`` call of the
    bench's ``a2a`` row, timed once per variant."""
    from ditron.benchmarks import moe

    real, seen = ditron.ops.all_to_all_device, []

    def spy(x, splits, cap, **kw):
        out, out_splits = real(x, splits, cap, **kw)
        seen.append((int(splits.sum()), int(out_splits.sum()), cap))
        return out, out_splits

    def once(fns, rounds, iters, warmup, device, batch=1):
        return {name: [float(fn() is not None)] for name, fn in fns.items()}

    ditron.ops.all_to_all_device, moe.time_in_rounds = spy, once
    try:
        (row,) = moe._a2a_rows(tokens, 128, topk, 1, 1, 0)
    finally:
        ditron.ops.all_to_all_device = real
    assert row["same_result"] is True
    return sorted(set(seen))


def test_moe_a2a_rows_arrive_on_every_rank_when_they_do_not_divide():
    """4 rows over 3 ranks: the last rank was sent 2 rows by each (6 for a capacity of 4: 2
    dropped) and the others 1 (a row of their output undefined, yet compared)."""
    assert ditron.launch(_a2a_received, 3, 4, 1, backend="cpu") == [[(4, 4, 4)]] * 3


def test_moe_even_splits():
    from ditron.benchmarks.moe import even_splits

    for rows in range(0, 14):
        for W in range(1, 5):
            sent = torch.stack([even_splits(rows, W, r) for r in range(W)])
            assert sent.dtype == torch.int64 and (sent.sum(1) == rows).all()
            assert (sent.sum(0) == rows).all(), (rows, W, sent)  # what each rank receives
            assert int(sent.max() - sent.min()) <= (rows % W > 0)


def _checks_with_a_wrong_rank() -> tuple[bool, float, float]:
    """The a2a row's ``same_result`` and the layer row's ``max_rel_err`` where rank 1 alone
    gets a wrong fused all-to-all and a NaN in its layer's output; and :func:`worst` of a
    NaN on rank 1 beside a finite value on rank 0."""
    from ditron.benchmarks import moe, worst

    me = ditron.world().rank
    real_a2a, real_combine = ditron.ops.all_to_all_device, ditron.ops.moe_combine

    def wrong_a2a(x, splits, cap, **kw):
        out, out_splits = real_a2a(x, splits, cap, **kw)
        return (out + 1 if me == 1 and "send_index" in kw else out), out_splits

    def nan_combine(*args, **kw):
        out = real_combine(*args, **kw)
        return out.fill_(float("nan")) if me == 1 else out

    def once(fns, rounds, iters, warmup, device, batch=1):
        return {name: [1.0] for name in fns}

    ditron.ops.all_to_all_device, ditron.ops.moe_combine = wrong_a2a, nan_combine
    saved, moe.time_in_rounds = moe.time_in_rounds, once
    try:
        (a2a,) = moe._a2a_rows(4, 128, 1, 1, 1, 0)
        (layer,) = moe._layer_rows(4, 128, 16, 4, 2, 1, 1, 0)
    finally:
        ditron.ops.all_to_all_device, ditron.ops.moe_combine = real_a2a, real_combine
        moe.time_in_rounds = saved
    return a2a["same_result"], layer["max_rel_err"], worst(float("nan") if me else 0.5)


def test_moe_checks_report_a_wrong_rank():
    """A wrong result on rank 1 alone: ``same_result`` was the largest of the ranks' flags
    (True where any rank matched) and ``max_rel_err`` gloo's MAX, which keeps rank 0's finite
    error beside rank 1's NaN; both passed a broken rank as correct."""
    for same, err, nan in ditron.launch(_checks_with_a_wrong_rank, 2, backend="cpu"):
        assert same is False
        assert math.isnan(err) and math.isnan(nan)


def _collectives_call_order(out: str) -> tuple[list[str], list[dict]]:
    """The implementations ``collectives._run`` calls, in order, and its records, for one
    op and size of two implementations (stand-ins that log their calls), with ``--busy``."""
    from ditron.benchmarks import collectives

    calls: list[str] = []

    def impls(name, size, dtype, engines, base_ok, symmetric):
        return size, [(label, lambda label=label: calls.append(label)) for label in "ab"]

    collectives._ops_for = impls
    args = collectives._parse(["--ops", "all_gather", "--sizes", "4K", "--warmup", "2",
                               "--iters", "6", "--busy", "--out", out])
    collectives._run(args, [4096])
    with open(f"{out}/collectives.json") as f:
        return calls, json.load(f)["records"]


def test_collectives_busy_rows_rotate_like_the_isolated_ones(tmp_path):
    """``--busy`` timed every implementation's calls back to back one after the other, the
    first always first (on a cooler GPU), unlike the isolated rows' rotating rounds (and
    docs/collectives.md): now in the same rounds, each implementation leading one."""
    from ditron.benchmarks.collectives import ROUNDS

    calls, records = ditron.launch(_collectives_call_order, 1, str(tmp_path),
                                   backend="cpu")[0]
    per_round = 2  # max(2, ceil(6 iters / 3 rounds))
    isolated = 2 * (2 + (ROUNDS - 1) + ROUNDS * per_round)  # warm-up, one before a round
    busy = calls[isolated:]
    assert busy.count("a") == busy.count("b") == isolated // 2  # the same counts
    # each round's calls of one implementation in a row: "a", "b" then "b", "a" then ...
    runs = [label for i, label in enumerate(busy) if i == 0 or busy[i - 1] != label]
    assert runs == ["a", "b", "a", "b"], runs  # rounds ab, ba, ab (the b's of 1-2 join)
    assert [r["impl"] for r in records] == ["a", "b", "a busy", "b busy"]
    assert all(r["us"] > 0 for r in records)


def _tp_gemm_in_world(out: str) -> tuple[list, list[int | str | None]]:
    """The rows ``bench tp-gemm --smoke`` measures when called inside the world (its
    ``_measure`` a stand-in), and the exit codes of tp-gemm and collectives given a
    ``--world-size`` that differs from the world's."""
    from ditron.benchmarks import collectives, tp_gemm

    seen = []
    tp_gemm._measure = lambda rows, *args: seen.append(rows) or []
    assert tp_gemm.main(["--smoke", "--out", out]) == 0
    codes = []
    for main, argv in ((tp_gemm.main, ["--smoke"]), (collectives.main, [])):
        try:
            main([*argv, "--world-size", "2", "--out", out])
            codes.append(None)
        except SystemExit as exc:
            codes.append(exc.code)
    return seen, codes


def test_tp_gemm_inside_a_world_times_its_shapes(tmp_path):
    """Called inside a world of 3 ranks, ``bench tp-gemm`` made its shapes for 2 (the
    default of a launch of its own, or ``--world-size``), timed them on the 3 and reported
    the 2's shape (a world of 5 ran M = 45 and reported 48); a ``--world-size`` that differs
    from the world's is now a usage error on every rank."""
    from ditron.benchmarks.tp_gemm import shapes

    for seen, codes in ditron.launch(_tp_gemm_in_world, 3, str(tmp_path), backend="cpu"):
        assert seen == [shapes(["ag", "rs"], 1.0, True, 3)]
        assert codes == [2, 2]


class _Stop(Exception):
    pass


@pytest.mark.parametrize("name", ["tp_gemm", "tp_mlp", "moe", "megakernel"])
def test_smoke_help_names_the_timing_it_sets(name, tmp_path, monkeypatch, capsys):
    """``--smoke`` also sets short timing options (those not given), while ``--help`` showed
    only their full-run defaults (``--warmup`` "default 5" for a run that warms up once);
    its help now names each option it sets, with the value it sets."""
    module = importlib.import_module(f"ditron.benchmarks.{name}")
    set_by_smoke = {}

    def record(parser, argv, args, shape, timing):
        set_by_smoke.update(timing)
        raise _Stop

    monkeypatch.setattr(module, "smoke_defaults", record)
    monkeypatch.chdir(tmp_path)  # where a default --out folder is made
    with pytest.raises(_Stop):
        module.main(["--smoke", "--world-size", "2"])
    with pytest.raises(SystemExit):
        module.main(["--help"])
    help_text = " ".join(capsys.readouterr().out.split())
    smoke = help_text[help_text.index("--smoke "):]
    assert set_by_smoke and all(f"--{dest} {value}" in smoke
                                for dest, value in set_by_smoke.items()), smoke


def _symm_mem_on_rank_0_only(stage: str):
    """PyTorch's symmetric memory made to work on rank 0 alone, failing on rank 1 at
    ``stage`` (``"empty"`` or ``"rendezvous"``; ``"none"``: on both ranks): what
    ``_symm_mem_input`` returns there."""
    import torch.distributed._symmetric_memory as symm_mem

    from ditron.benchmarks import collectives

    if ditron.world().rank == 0 or stage in ("rendezvous", "none"):
        symm_mem.empty = lambda n, dtype, device: torch.empty(n, dtype=dtype, device=device)
    else:
        symm_mem.empty = lambda *a, **k: (_ for _ in ()).throw(RuntimeError("no symm_mem"))
    if ditron.world().rank == 0 or stage == "none":
        symm_mem.rendezvous = lambda t, name: None
    else:
        symm_mem.rendezvous = lambda *a: (_ for _ in ()).throw(RuntimeError("no rendezvous"))
    got = collectives._symm_mem_input(torch.arange(4.0))
    return None if got is None else got[0].tolist()


@pytest.mark.parametrize("stage", ["empty", "rendezvous"])
def test_collectives_symm_mem_baseline_is_timed_on_every_rank_or_none(stage):
    """The symmetric-memory baseline of ``bench collectives --graphs``: where one rank
    cannot make it, no rank times it (rank 0 used to time it alone: its replays then
    waited for peers that never ran them)."""
    assert ditron.launch(_symm_mem_on_rank_0_only, 2, stage, backend="cpu") == [None, None]


def test_collectives_symm_mem_baseline_starts_from_zeros():
    """The symmetric-memory buffer two_shot_all_reduce_ sums into in place starts from zeros
    (it held the input: each replay multiplied it by the world size, bf16 reached inf)."""
    assert ditron.launch(_symm_mem_on_rank_0_only, 2, "none", backend="cpu") == [[0.0] * 4] * 2


def _rotating_on_uneven_ranks() -> list[float]:
    """``collectives._rotating`` of two stand-in implementations whose calls take longer on
    rank 1 (10 ms, 20 ms there; 1 ms, 2 ms on rank 0)."""
    from ditron.benchmarks import collectives

    scale = 10.0 if ditron.world().rank == 1 else 1.0
    fns = [lambda d=d: time.sleep(d * scale) for d in (0.001, 0.002)]
    return collectives._rotating(fns, warmup=1, iters=4)


def test_collectives_report_the_slowest_ranks_median():
    # before: each rank returned its own medians, and rank 0 (the one that reports)
    # printed and wrote its own, ~1 ms and ~2 ms here, not the collective's time
    got = ditron.launch(_rotating_on_uneven_ranks, 2, backend="cpu")
    assert got[0] == got[1]
    assert got[0][0] >= 0.01 and got[0][1] >= 0.02, got
