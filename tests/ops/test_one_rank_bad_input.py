"""One rank of a collective call passes bad or different arguments while its peers pass
good ones: every rank raises (the bad rank its own error, each peer a ``ValueError``
naming the rank and its problem, or the disagreement) instead of waiting for a rank that
is gone, and the next good call works on every rank (no stale signal, epoch or
workspace). Ranks whose arguments differ but are each valid (a non-contiguous input, a
symmetric ``out`` on one rank only) get correct results.

Every op of ``ditron.ops`` (collectives, all_to_all with and without splits, the TP
GEMMs, the MoE dispatch and combine), world sizes 2 and 3, the bad rank first, middle and
last. In debug mode (a wait timeout) every call is checked by default
(``DITRON_CHECK_CALLS``), so the cases run in one launch per world size, one after
another; with ``DITRON_CHECK_CALLS=0`` a rank refusing its arguments tells its peers only
while no call of the op has been agreed (afterwards they may repeat an agreed call without
a host gather: ``runtime/agreement.py``), which the first-call test covers.
Inputs are seeded: every rank can compute every rank's input, and so the references."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable

import pytest
import torch

import ditron
from ditron import ops

SEED = 1234
#: rows per rank of the collectives' inputs, columns, the GEMMs' N
ROWS, COLS, N = 6, 5, 7
#: the MoE layer: tokens per rank, hidden size, top-k; experts: 2 per rank
TOKENS, HIDDEN, TOPK = 5, 8, 2


def _x(rank: int, rows: int = ROWS, cols: int = COLS) -> torch.Tensor:
    """Rank ``rank``'s seeded input (every rank can make every rank's)."""
    g = torch.Generator().manual_seed(SEED + rank)
    return torch.randn(rows, cols, generator=g)


def _ids(rank: int, w: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(SEED + 100 + rank)
    return torch.randint(0, 2 * w, (TOKENS, TOPK), generator=g)


def _b() -> torch.Tensor:
    return torch.randn(COLS, N, generator=torch.Generator().manual_seed(SEED - 1))


def _good(op: str) -> tuple[torch.Tensor, torch.Tensor]:
    """``op``'s good call on this rank and its reference, ``(got, expected)``."""
    w, me = ditron.world().world_size, ditron.world().rank
    xs = [_x(r, ROWS * w) for r in range(w)]
    x, total = xs[me], sum(xs)
    if op == "all_gather":
        return ops.all_gather(x), torch.cat(xs)
    if op == "reduce_scatter":
        return ops.reduce_scatter(x), total.chunk(w)[me]
    if op == "all_reduce":
        return ops.all_reduce(x), total
    if op == "all_to_all":
        return ops.all_to_all(x), torch.cat([xq.chunk(w)[me] for xq in xs])
    if op == "all_to_all_splits":
        ins = [(me + q) % w for q in range(w)]  # uneven, sizes differ per rank
        ins[-1] += ROWS * w - sum(ins)
        table = [[(p + q) % w for q in range(w)] for p in range(w)]
        for p in range(w):
            table[p][-1] += ROWS * w - sum(table[p])
        parts = [xs[p][sum(table[p][:me]):sum(table[p][:me + 1])] for p in range(w)]
        return ops.all_to_all(x, ins), torch.cat(parts)
    if op == "ag_gemm":
        small = [_x(r) for r in range(w)]
        return ops.ag_gemm(small[me], _b()), torch.cat(small) @ _b()
    if op == "gemm_rs":
        return ops.gemm_rs(x, _b()), (total @ _b()).chunk(w)[me]
    if op == "gemm_ar":
        return ops.gemm_ar(x, _b()), total @ _b()
    if op in ("moe_dispatch", "moe_combine"):  # identity experts, weight 1: k copies of x
        h = _x(me, TOKENS, HIDDEN)
        d = ops.moe_dispatch(h, _ids(me, w), 2 * w)
        return ops.moe_combine(d.x, d), TOPK * h
    raise AssertionError(op)


@dataclasses.dataclass(frozen=True)
class Case:
    """``call(bad)`` runs ``op`` with the bad rank's arguments where ``bad``. ``error``:
    the bad rank's error (type, regex); ``None``: the ranks disagree, and all raise the
    same ``ValueError`` matching ``differs``; ``"valid"``: the call is good and its result
    is checked against the reference."""

    name: str
    op: str
    call: Callable[[bool], object]
    error: tuple[type, str] | None | str = None
    differs: str = ""


def _cases() -> list[Case]:
    w, me = ditron.world().world_size, ditron.world().rank
    dev = ditron.world().device
    x = _x(me, ROWS * w).to(dev)
    small = _x(me).to(dev)
    b = _b().to(dev)
    sym = ditron.empty((w * w * ROWS, COLS), torch.float32)  # collective: made on every rank
    h = _x(me, TOKENS, HIDDEN).to(dev)
    ids = _ids(me, w).to(dev)
    E = 2 * w

    def combine(bad: bool, what: str):
        d = ops.moe_dispatch(h, ids, E)
        y, weights = d.x, torch.ones(TOKENS, TOPK, device=dev)
        if bad and what == "y":
            y = y[:-1]
        if bad and what == "weights":
            weights = torch.ones(TOKENS, TOPK + 1, device=dev)
        return ops.moe_combine(y, d, weights)

    def pick(bad: bool, good, wrong):
        return wrong if bad else good

    out_shape = (w * w * ROWS, COLS)
    V = ValueError
    return [
        # all_gather
        Case("ag shape", "all_gather", lambda bad: ops.all_gather(pick(bad, x, x[:2])),
             None, r"shape differs"),
        Case("ag dtype", "all_gather", lambda bad: ops.all_gather(pick(bad, x, x.double())),
             None, r"dtype differs"),
        Case("ag 16-byte dtype", "all_gather",
             lambda bad: ops.all_gather(pick(bad, x, x.to(torch.complex128))),
             (V, "complex128 .*not supported")),
        Case("ag dim", "all_gather", lambda bad: ops.all_gather(x, pick(bad, 0, 2)),
             (V, "dim 2 is out of range")),
        Case("ag out shape", "all_gather", lambda bad: ops.all_gather(
            x, out=torch.empty(out_shape[0] + bad, COLS, device=dev)), (V, "out is")),
        Case("ag out dtype", "all_gather", lambda bad: ops.all_gather(x, out=torch.empty(
            out_shape, dtype=pick(bad, torch.float32, torch.float64), device=dev)),
            (V, "out is .*float64")),
        Case("ag out expanded", "all_gather", lambda bad: ops.all_gather(x, out=pick(
            bad, torch.empty(out_shape, device=dev),
            torch.empty(1, COLS, device=dev).expand(*out_shape))), (V, "share memory")),
        Case("ag meta", "all_gather", lambda bad: ops.all_gather(
            pick(bad, x, torch.empty_like(x, device="meta"))), (V, "meta")),
        Case("ag engine", "all_gather", lambda bad: ops.all_gather(
            x, engine=pick(bad, None, "pigeon")), (V, "unknown engine 'pigeon'")),
        Case("ag not a tensor", "all_gather", lambda bad: ops.all_gather(
            pick(bad, x, x.tolist())), (TypeError, "expected a torch.Tensor")),
        Case("ag non-contiguous", "all_gather", lambda bad: ops.all_gather(
            pick(bad, x, x.t().contiguous().t())), "valid"),
        Case("ag symmetric out", "all_gather", lambda bad: ops.all_gather(
            x, out=pick(bad, torch.empty(out_shape, device=dev), sym)), "valid"),
        # reduce_scatter
        Case("rs shape", "reduce_scatter", lambda bad: ops.reduce_scatter(
            pick(bad, x, x[:w])), None, "shape differs"),
        Case("rs indivisible", "reduce_scatter", lambda bad: ops.reduce_scatter(
            pick(bad, x, x[:w + 1])), (V, "does not divide")),
        Case("rs op name", "reduce_scatter", lambda bad: ops.reduce_scatter(
            x, op=pick(bad, "sum", "prod")), (V, "unsupported reduction 'prod'")),
        Case("rs op", "reduce_scatter", lambda bad: ops.reduce_scatter(
            x, op=pick(bad, "sum", "max")), None, "op differs"),
        Case("rs out shape", "reduce_scatter", lambda bad: ops.reduce_scatter(
            x, out=torch.empty(ROWS + bad, COLS, device=dev)), (V, "out is")),
        Case("rs dtype", "reduce_scatter", lambda bad: ops.reduce_scatter(
            pick(bad, x, x.to(torch.complex64))), (V, "cannot sum dtype torch.complex64")),
        Case("rs non-contiguous", "reduce_scatter", lambda bad: ops.reduce_scatter(
            pick(bad, x, x.t().contiguous().t())), "valid"),
        # all_reduce
        Case("ar shape", "all_reduce", lambda bad: ops.all_reduce(pick(bad, x, x[:2])),
             None, "shape differs"),
        Case("ar dtype", "all_reduce", lambda bad: ops.all_reduce(pick(bad, x, x.half())),
             None, "dtype differs"),
        Case("ar method name", "all_reduce", lambda bad: ops.all_reduce(
            x, pick(bad, "auto", "three_shot")), (V, "unknown method 'three_shot'")),
        Case("ar method", "all_reduce", lambda bad: ops.all_reduce(
            x, pick(bad, "one_shot", "two_shot")), None, "method differs"),
        Case("ar op name", "all_reduce", lambda bad: ops.all_reduce(
            x, op=pick(bad, "sum", "bogus")), (V, "unsupported reduction 'bogus'")),
        Case("ar bool sum", "all_reduce", lambda bad: ops.all_reduce(pick(bad, x, x > 0)),
             (V, "cannot sum dtype torch.bool")),
        Case("ar non-contiguous", "all_reduce", lambda bad: ops.all_reduce(
            pick(bad, x, x.t().contiguous().t())), "valid"),
        # all_to_all, without and with splits
        Case("a2a rows", "all_to_all", lambda bad: ops.all_to_all(pick(bad, x, x[:w])),
             None, "rows differ"),
        Case("a2a dtype", "all_to_all", lambda bad: ops.all_to_all(pick(bad, x, x.double())),
             None, "dtype differs"),
        Case("a2a 0-d", "all_to_all", lambda bad: ops.all_to_all(pick(bad, x, x[0, 0])),
             (V, "at least one dimension")),
        Case("a2a indivisible", "all_to_all", lambda bad: ops.all_to_all(
            pick(bad, x, x[:w + 1])), (V, "do not divide")),
        Case("a2a splits length", "all_to_all_splits", lambda bad: ops.all_to_all(
            x, pick(bad, [ROWS] * w, [ROWS])), (V, "in_splits must be")),
        Case("a2a splits sum", "all_to_all_splits", lambda bad: ops.all_to_all(
            x, pick(bad, [ROWS] * w, [1] * w)), (V, "sum to")),
        Case("a2a out_splits length", "all_to_all_splits", lambda bad: ops.all_to_all(
            x, [ROWS] * w, pick(bad, [ROWS] * w, [ROWS])), (V, "out_splits must be")),
        Case("a2a splits dtype", "all_to_all_splits", lambda bad: ops.all_to_all(
            pick(bad, x, x.double()), [ROWS] * w), None, "dtype differs"),
        Case("a2a non-contiguous", "all_to_all", lambda bad: ops.all_to_all(
            pick(bad, x, x.t().contiguous().t())), "valid"),
        # TP GEMMs
        Case("ag_gemm shape", "ag_gemm", lambda bad: ops.ag_gemm(pick(bad, small, small[:2]),
                                                                  b), None, "a_shape differs"),
        Case("ag_gemm dtype", "ag_gemm", lambda bad: ops.ag_gemm(
            pick(bad, small, small.double()), pick(bad, b, b.double())),
            (V, "dtype torch.float64; use")),
        Case("ag_gemm b dtype", "ag_gemm", lambda bad: ops.ag_gemm(
            small, pick(bad, b, b.half())), (V, "dtype mismatch")),
        Case("ag_gemm method", "ag_gemm", lambda bad: ops.ag_gemm(
            small, b, method=pick(bad, "auto", "best")), (V, "method must be")),
        Case("ag_gemm engine", "ag_gemm", lambda bad: ops.ag_gemm(
            small, b, engine=pick(bad, None, "pigeon")), (V, "engine must be")),
        Case("ag_gemm chunk_rows", "ag_gemm", lambda bad: ops.ag_gemm(
            small, b, chunk_rows=pick(bad, None, 0)), (V, "chunk_rows must be")),
        Case("ag_gemm non-contiguous", "ag_gemm", lambda bad: ops.ag_gemm(
            pick(bad, small, small.t().contiguous().t()), b), "valid"),
        Case("gemm_rs indivisible", "gemm_rs", lambda bad: ops.gemm_rs(
            pick(bad, x, x[:w + 1]), b), (V, "not divisible")),
        Case("gemm_rs chunk_rows", "gemm_rs", lambda bad: ops.gemm_rs(
            x, b, chunk_rows=pick(bad, None, 0)), (V, "chunk_rows must be")),
        Case("gemm_rs early_rows", "gemm_rs", lambda bad: ops.gemm_rs(
            x, b, early_rows=pick(bad, None, -1)), (V, "early_rows must be")),
        Case("gemm_rs engine", "gemm_rs", lambda bad: ops.gemm_rs(
            x, b, engine=pick(bad, None, "pigeon")), (V, "engine must be")),
        Case("gemm_ar shape", "gemm_ar", lambda bad: ops.gemm_ar(pick(bad, x, x[:2]), b),
             None, "a_shape differs"),
        Case("gemm_ar 3-d", "gemm_ar", lambda bad: ops.gemm_ar(pick(bad, x, x[None]), b),
             (V, "must be 2-D")),
        # MoE
        Case("dispatch k", "moe_dispatch", lambda bad: ops.moe_dispatch(
            h, pick(bad, ids, ids[:, :1]), E), None, "k, max_recv_rows differ"),
        Case("dispatch ids rows", "moe_dispatch", lambda bad: ops.moe_dispatch(
            h, pick(bad, ids, ids[:2]), E), (V, "topk_ids must be")),
        Case("dispatch experts", "moe_dispatch", lambda bad: ops.moe_dispatch(
            h, ids, pick(bad, E, E + 1)), (V, "num_experts must be")),
        Case("dispatch float ids", "moe_dispatch", lambda bad: ops.moe_dispatch(
            h, pick(bad, ids, ids.float()), E), (V, "topk_ids must be integers")),
        Case("combine y", "moe_combine", lambda bad: combine(bad, "y"), (V, "y must be")),
        Case("combine weights", "moe_combine", lambda bad: combine(bad, "weights"),
             (V, "topk_weights must be")),
    ]


def _close(got: torch.Tensor, expected: torch.Tensor, what: str) -> None:
    torch.testing.assert_close(got.cpu(), expected, rtol=1e-5, atol=1e-5, msg=what)


def _check_case(case: Case, bad_rank: int) -> None:
    """Run ``case`` with ``bad_rank`` bad, check what this rank raised (or returned), then
    the op's next good call."""
    me = ditron.world().rank
    bad = me == bad_rank
    if case.error == "valid":
        got = case.call(bad)
        _close(got, _good(case.op)[1], f"{case.name}, bad rank {bad_rank}")
    elif case.error is None:
        with pytest.raises(ValueError, match=rf"ranks disagree on the call .*{case.differs}"):
            case.call(bad)
    else:
        kind, words = case.error
        expected = (kind, words) if bad else (
            ValueError, rf"(?s)a rank refused the call's arguments:\n  rank {bad_rank}: "
                        rf"{kind.__name__}: .*{words}")
        with pytest.raises(expected[0], match=expected[1]) as info:
            case.call(bad)
        assert bad or f"rank {bad_rank}" in str(info.value)
    _close(*_good(case.op), f"good call after {case.name}, bad rank {bad_rank}")


def _every_other_case(first: int) -> int:
    """Every other case from ``first`` in turn, the bad rank going round (first, middle,
    last, ...)."""
    w = ditron.world().world_size
    cases = _cases()[first::2]
    for i, case in enumerate(cases):
        _check_case(case, i % w)
    return len(cases)


@pytest.mark.parametrize(("world_size", "first"), [(2, 0), (3, 1)])
def test_one_rank_bad_input_raises_on_every_rank(world_size, first, monkeypatch):
    """Every call checked (debug mode's default, ``DITRON_CHECK_CALLS`` unset): the cases
    (half of them at each world size, so that each op runs at both) one after another on
    one world, each followed by a good call: a rank refusing a repeated call's arguments
    tells its peers (they raised nothing and paired their call with its next one, or
    waited, while only a signature's first call was checked in debug mode)."""
    monkeypatch.delenv("DITRON_CHECK_CALLS", raising=False)
    monkeypatch.setenv("DITRON_WAIT_TIMEOUT", "20")
    monkeypatch.setenv("DITRON_LAUNCH_TIMEOUT", "120")
    counts = ditron.launch(_every_other_case, world_size, first)
    assert counts == [counts[0]] * world_size and counts[0] >= 25


#: the first call of each op (default settings: its peers gather) refused on one rank
_FIRST_CALLS = ("ag out shape", "rs op name", "ar method name", "a2a indivisible",
                "a2a splits sum", "ag_gemm chunk_rows", "gemm_rs early_rows", "gemm_ar 3-d",
                "dispatch experts")


def _first_calls(bad_rank: int) -> list[str]:
    """Each op's first call refused on ``bad_rank``: what each rank raised."""
    by_name = {c.name: c for c in _cases()}
    seen = []
    for name in _FIRST_CALLS:
        case = by_name[name]
        with pytest.raises((ValueError, TypeError)) as info:
            case.call(ditron.world().rank == bad_rank)
        seen.append(str(info.value))
        _close(*_good(case.op), f"good call after {name}")
    return seen


@pytest.mark.parametrize(("world_size", "bad_rank"), [(2, 0), (3, 1), (3, 2)])
def test_first_call_refused_by_one_rank(world_size, bad_rank, monkeypatch):
    """Default settings: a rank refusing the arguments of an op's first call tells its
    peers, which were waiting for it in the call's host check (before: they waited until
    the host group's timeout, 10 minutes or more)."""
    monkeypatch.setenv("DITRON_CHECK_CALLS", "0")
    monkeypatch.setenv("DITRON_WAIT_TIMEOUT", "20")
    monkeypatch.setenv("DITRON_LAUNCH_TIMEOUT", "120")
    res = ditron.launch(_first_calls, world_size, bad_rank)
    for rank, messages in enumerate(res):
        for name, message in zip(_FIRST_CALLS, messages, strict=True):
            if rank != bad_rank:
                assert re.search(rf"a rank refused the call's arguments:\n  rank {bad_rank}: ",
                                 message), (name, message)


def _other_calls() -> list[str]:
    """The last rank makes another call than its peers, then skips one: every rank raises,
    naming the calls, and the ranks are in step again afterwards."""
    w, me = ditron.world().world_size, ditron.world().rank
    last = me == w - 1
    x = _x(me, ROWS * w)
    seen = []
    with pytest.raises(ValueError, match="ranks are in different collective calls") as info:
        ops.all_reduce(x) if last else ops.all_gather(x)
    seen.append(str(info.value))
    _close(*_good("all_gather"), "all_gather after another call")
    # the last rank skips the all_reduce: its all_gather meets the peers' all_reduce
    with pytest.raises(ValueError, match="ranks are in different collective calls") as info:
        ops.all_gather(x[:w]) if last else ops.all_reduce(x[:w])
    seen.append(str(info.value))
    _close(*_good("all_gather"), "all_gather after a skipped call")
    _close(*_good("gemm_ar"), "gemm_ar")
    return seen


@pytest.mark.parametrize("check_calls", ["0", "1"])
def test_other_or_skipped_call_raises_on_every_rank(check_calls, monkeypatch):
    monkeypatch.setenv("DITRON_CHECK_CALLS", check_calls)
    monkeypatch.setenv("DITRON_WAIT_TIMEOUT", "20")
    monkeypatch.setenv("DITRON_LAUNCH_TIMEOUT", "120")
    res = ditron.launch(_other_calls, 3)
    for messages in res:
        assert "rank 0: ditron.ops.all_gather" in messages[0]
        assert "rank 2: ditron.ops.all_reduce" in messages[0]
        assert "rank 0: ditron.ops.all_reduce" in messages[1]
        assert "rank 2: ditron.ops.all_gather" in messages[1]
