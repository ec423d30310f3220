"""``runtime.agreement.agree``: ranks that pass different fields for a call raise on every
rank, naming the fields that differ and each rank's values; an agreed call is remembered
(no second host gather) unless ``remember=False`` or ``DITRON_CHECK_CALLS=1``, which also
catches a rank repeating an agreed call while another makes a new one.
``raise_together``: a problem one rank finds in its own data raises on every rank.
``rank0_decides``: rank 0's choice reaches every rank, and so does its failure.
``gather``: every rank's fields, and a rank refusing its arguments in ``refused_together``
makes every rank raise there."""

from __future__ import annotations

import pytest
import torch
import torch.distributed as dist

import ditron
from ditron.runtime import host_rows
from ditron.runtime.agreement import (
    agree,
    gather,
    raise_together,
    rank0_decides,
    refused_together,
)
from ditron.runtime.world import current

SAME = {"shape": (4, 3), "dtype": torch.bfloat16, "method": "one_shot"}


def _agreement_case() -> tuple[list[str], tuple[int, int]]:
    """The messages of the disagreeing calls (none at W = 1) and the host gathers made:
    row exchanges, and gathers of the pickled fields."""
    w = ditron.world()
    gathers = []
    real_rows, real_objects = host_rows.exchange, dist.all_gather_object

    def counted(real, what):
        def call(*args, **kw):
            gathers.append(what)
            return real(*args, **kw)
        return call

    host_rows.exchange = counted(real_rows, "rows")
    dist.all_gather_object = counted(real_objects, "fields")
    try:
        agree("op", **SAME)
        agree("op", **SAME)  # remembered unless DITRON_CHECK_CALLS=1
        agree("op", remember=False, **SAME)
        calls = [{**SAME, "shape": (6 + w.rank % 2, 3)},  # new on every rank
                 {**SAME, "dtype": torch.float32 if w.rank else torch.bfloat16,
                  "method": f"m{w.rank}"}]
        if current().settings.check_calls:  # rank 0 repeats the agreed call
            calls.append(SAME if w.rank == 0 else {**SAME, "shape": (5, 3)})
        messages = []
        for fields in calls:
            if w.world_size == 1:
                agree("op", **fields)  # nobody to disagree with
                continue
            with pytest.raises(ValueError) as info:
                agree("op", **fields)
            messages.append(str(info.value))
        agree("op", **SAME)  # a failed check leaves the agreed ones usable
    finally:
        host_rows.exchange, dist.all_gather_object = real_rows, real_objects
    return messages, (gathers.count("rows"), gathers.count("fields"))


@pytest.mark.parametrize("world_size", [1, 2, 3])
@pytest.mark.parametrize("check_calls", [False, True])
def test_disagreeing_ranks_raise_on_every_rank(world_size, check_calls, backend,
                                               monkeypatch):
    monkeypatch.setenv("DITRON_CHECK_CALLS", "1" if check_calls else "0")
    res = ditron.launch(_agreement_case, world_size, backend=backend)
    messages, gathers = res[0]
    assert all(r == res[0] for r in res), "every rank raises the same messages"
    if world_size == 1:
        assert res == [([], (0, 0))]
        return
    # 2 of the 3 agreed calls exchange rows (3 with check_calls), then each disagreeing
    # call, and the last agreed call only with check_calls; only the disagreeing calls
    # gather the fields themselves
    assert gathers == ((3 + 3 + 1, 3) if check_calls else (2 + 2, 2))
    one, two = messages[:2]
    assert one.startswith("op: ranks disagree on the call (shape differs):\n")
    assert "  rank 1: shape=(7, 3), dtype=torch.bfloat16, method='one_shot'" in one
    assert two.startswith("op: ranks disagree on the call (dtype, method differ):\n")
    for r in range(world_size):
        dtype = "torch.float32" if r else "torch.bfloat16"
        assert f"  rank {r}: shape=(4, 3), dtype={dtype}, method='m{r}'" in two
    if check_calls:
        assert "  rank 0: shape=(4, 3)," in messages[2]
        assert "  rank 1: shape=(5, 3)," in messages[2]


def _different_calls() -> str:
    """Rank 0 repeats a remembered call (no gather), then reaches another op's gather while
    rank 1 gathers for a new signature of the first: both raise, naming the calls."""
    me = ditron.world().rank
    agree("first", n=1)
    if me == 0:
        agree("first", n=1)  # remembered: no gather
    with pytest.raises(ValueError) as info:
        if me == 0:
            agree("second", n=1)
        else:
            agree("first", n=2)
    return str(info.value)


def test_ranks_in_different_calls_are_named(backend, monkeypatch):
    monkeypatch.setenv("DITRON_CHECK_CALLS", "0")  # rank 0's repeated call skips the gather
    res = ditron.launch(_different_calls, 2, backend=backend)
    assert "ranks are in different collective calls" in res[0]
    assert "  rank 0: second\n  rank 1: first" in res[0] and "rank 0: second" in res[1]


def _problems() -> list[str]:
    """Three calls: no rank has a problem, the last rank has one, every rank has one."""
    w, me = ditron.world().world_size, ditron.world().rank
    raise_together("my_check", None)  # returns on every rank
    messages = []
    for bad in (me == w - 1, True):
        with pytest.raises(ValueError) as info:
            raise_together("my_check", f"value {me} too large" if bad else None)
        messages.append(str(info.value))
    return messages


@pytest.mark.parametrize("world_size", [1, 2, 3])
def test_a_problem_of_one_rank_raises_on_every_rank(world_size, backend):
    res = ditron.launch(_problems, world_size, backend=backend)
    last = world_size - 1
    every = "\n".join(f"  rank {r}: value {r} too large" for r in range(world_size))
    for one, everyone in res:
        assert one == f"my_check:\n  rank {last}: value {last} too large"
        assert everyone == f"my_check:\n{every}"


def _gathers() -> tuple[list, list[str]]:
    """A gather of values that differ per rank; then one where the last rank refuses its
    arguments first (twice: the gathers stay paired after it)."""
    w, me = ditron.world().world_size, ditron.world().rank
    got = gather("pairs", mine=me * 10, peer=(me + 1) % w)
    errors = []
    for _ in range(2):
        with pytest.raises(ValueError) as info:
            with refused_together("pairs", peers=w > 1):
                if me == w - 1:
                    raise ValueError("my links are bad")
            gather("pairs", mine=me)
        errors.append(str(info.value))
    return got, errors


@pytest.mark.parametrize("world_size", [1, 2, 3])
def test_gather_returns_every_rank_and_tells_a_refusal(world_size, backend):
    res = ditron.launch(_gathers, world_size, backend=backend)
    last = world_size - 1
    for rank, (got, errors) in enumerate(res):
        assert got == [(r * 10, (r + 1) % world_size) for r in range(world_size)]
        if rank == last:
            assert errors == ["my links are bad"] * 2
        else:
            assert errors == ["pairs: a rank refused the call's arguments:\n"
                              f"  rank {last}: ValueError: my links are bad"] * 2


def _mixed_checks() -> list[str]:
    """Rank 0 in all_to_all's split gather while the others make all_gather's first check,
    then rank 0 allocating, then deciding for every rank, while the others agree on a call;
    then calls that match."""
    me, device = ditron.world().rank, ditron.world().device
    x = torch.arange(6.0, device=device) + 10 * me
    errors = []
    with pytest.raises(ValueError) as info:
        if me == 0:
            ditron.ops.all_to_all(x, [6] + [0] * (ditron.world().world_size - 1))
        else:
            ditron.ops.all_gather(x)
    errors.append(str(info.value))
    with pytest.raises(ValueError) as info:
        if me == 0:
            ditron.empty((4,), torch.float32)
        else:
            agree("my_op", shape=(4,))
    errors.append(str(info.value))
    with pytest.raises(ValueError) as info:  # a broadcast beside a gather: gloo aborted too
        if me == 0:
            rank0_decides("pick", lambda: 3)
        else:
            agree("my_op", shape=(4,))
    errors.append(str(info.value))
    got = ditron.ops.all_gather(x)
    assert torch.equal(got, torch.cat([torch.arange(6.0, device=device) + 10 * r
                                       for r in range(ditron.world().world_size)]))
    return errors


@pytest.mark.parametrize("world_size", [2, 3])
def test_ranks_in_checks_of_different_kinds_raise(world_size, backend, monkeypatch):
    # all_to_all's split gather was a tensor gather of another size than the agreement's
    # object gather: gloo aborted the rank processes; rank0_decides, a broadcast, hung
    monkeypatch.setenv("DITRON_LAUNCH_TIMEOUT", "60")
    res = ditron.launch(_mixed_checks, world_size, backend=backend)
    for a2a, alloc, decide in res:
        assert "ranks are in different collective calls" in decide, decide
        assert "  rank 0: pick\n  rank 1: my_op" in decide, decide
        assert "ranks are in different collective calls" in a2a, a2a
        assert "  rank 0: ditron.ops.all_to_all\n  rank 1: ditron.ops.all_gather" in a2a, a2a
        assert "ranks are in different collective calls" in alloc, alloc
        assert "  rank 0: ditron.empty" in alloc and "  rank 1: my_op" in alloc, alloc


def _rank0_decisions() -> tuple[object, str, str]:
    """A decision that reads rank 0's state reaches every rank; one that fails on rank 0
    raises on every rank (rank 0 its own error), and the next call still works."""
    me = ditron.world().rank
    value = rank0_decides("pick", lambda: {"rank": me, "blocks": (16, 32)})
    with pytest.raises((RuntimeError, KeyError)) as info:
        rank0_decides("pick", lambda: {}["missing"])
    after = rank0_decides("pick", lambda: me + 10)
    return value, f"{type(info.value).__name__}: {info.value}", after


@pytest.mark.parametrize("world_size", [1, 2, 3])
def test_rank0_decides_for_every_rank(world_size, backend):
    res = ditron.launch(_rank0_decisions, world_size, backend=backend)
    for rank, (value, error, after) in enumerate(res):
        assert value == {"rank": 0, "blocks": (16, 32)} and after == 10
        if rank == 0:
            assert error == "KeyError: 'missing'"
        else:
            assert error == ("RuntimeError: pick: rank 0 failed to decide for every rank: "
                             "KeyError: 'missing'")


def test_agreement_is_reachable_after_import_ditron():
    """docs/developing.md tells op writers to call ``ditron.runtime.agreement.agree`` after
    ``import ditron`` (it raised AttributeError: the module was not loaded)."""
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-c", "import ditron; "
                          "print(callable(ditron.runtime.agreement.agree), "
                          "callable(ditron.runtime.agreement.raise_together))"],
                         capture_output=True, text=True, timeout=300)
    assert out.stdout.split() == ["True", "True"], out.stderr


def _forgetting_case(capacity: int) -> tuple[int, int]:
    """Host gathers made: signatures past ``capacity`` are forgotten, least recently used
    first, on every rank alike, and agreed on again when they come back."""
    from ditron.runtime import bounded_cache

    bounded_cache.named("agreed_calls", capacity)
    count = [0]
    real = host_rows.exchange

    def counted(*args, **kw):
        count[0] += 1
        return real(*args, **kw)

    host_rows.exchange = counted
    try:
        for n in range(5):  # five signatures: the first two forgotten
            agree("op", n=n)
        first = count[0]
        agree("op", n=4)  # remembered
        agree("op", n=2)  # remembered (now the most recent)
        agree("op", n=0)  # forgotten: gathered again, n = 3 forgotten now
        agree("op", n=2)
        agree("op", n=3)
    finally:
        host_rows.exchange = real
    return first, count[0] - first


def test_agreed_signatures_are_bounded(backend, monkeypatch):
    monkeypatch.setenv("DITRON_CHECK_CALLS", "0")  # remembered calls skip the gather
    assert ditron.launch(_forgetting_case, 2, 3, backend=backend) == [(5, 2)] * 2
