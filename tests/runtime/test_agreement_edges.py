"""Edges of ``runtime.agreement`` and ``runtime.host_rows``: values a rank cannot pickle
raise on every rank (they aborted the peers, waiting in the gather the rank never made);
values equal only to themselves (NaN) agree and are gathered on every call on every rank
(a rank passing the very same NaN again skipped the gather its peer waited in); messages
name the call and fields of each rank where ranks are in different calls."""

from __future__ import annotations

import math
import threading

import numpy as np
import pytest

import ditron
from ditron.runtime import host_rows
from ditron.runtime.agreement import agree, gather, rank0_decides, refused_together


def _unpicklable() -> list[str]:
    """Rank 0 decides an unpicklable value; then gathers and agrees on one while the
    others pass ints; then every rank agrees normally (the gathers stay paired)."""
    me = ditron.world().rank
    lock = threading.Lock()
    errors = []
    for call in (lambda: rank0_decides("pick", lambda: lock),
                 lambda: gather("pairs", x=lock if me == 0 else me),
                 lambda: agree("op", f=lock if me == 0 else 1)):
        with pytest.raises(ValueError) as info:
            call()
        errors.append(str(info.value))
    agree("op", f=1)
    return errors


@pytest.mark.parametrize("world_size", [2, 3])
def test_unpicklable_values_raise_on_every_rank(world_size, backend, monkeypatch):
    monkeypatch.setenv("DITRON_LAUNCH_TIMEOUT", "60")
    res = ditron.launch(_unpicklable, world_size, backend=backend)
    for errors in res:
        assert errors == res[0]
        decide, pairs, op = errors
        head = "field values that cannot be pickled, so not sent to the other ranks:\n"
        assert decide.startswith("pick: " + head + "  rank 0: decision=<unpicklable ("), decide
        assert pairs.startswith("pairs: " + head + "  rank 0: x=<unpicklable <"), pairs
        assert op.startswith("op: " + head + "  rank 0: f=<unpicklable <"), op
        assert "cannot pickle '_thread.lock' object" in op and "rank 1" not in op


def _not_equal_to_themselves() -> tuple[int, list[str]]:
    """Host row exchanges of three calls with a NaN field (rank 0 the same object each
    time, the others a new one), then of calls whose values are written differently but
    equal, NaN beside them."""
    me = ditron.world().rank
    count = [0]
    real = host_rows.exchange

    def counted(*args, **kw):
        count[0] += 1
        return real(*args, **kw)

    host_rows.exchange = counted
    try:
        for _ in range(3):
            agree("op", eps=math.nan if me == 0 else float("nan"))
        nans = count[0]
        agree("other", eps=float("nan"), n=np.int64(4) if me == 0 else 4)
        with pytest.raises(ValueError) as info:
            agree("other", eps=float("nan"), n=5 if me == 0 else 4)
    finally:
        host_rows.exchange = real
    return nans, str(info.value)


def test_nan_fields_agree_and_are_gathered_on_every_call(backend, monkeypatch):
    monkeypatch.setenv("DITRON_LAUNCH_TIMEOUT", "60")
    res = ditron.launch(_not_equal_to_themselves, 2, backend=backend)
    for nans, message in res:
        assert nans == 3  # rank 0 gathered once and skipped twice: rank 1 waited alone
        assert message.startswith("other: ranks disagree on the call (n differs):\n"), message


def _messages() -> list[str]:
    """Rank 0 in a check of ``x`` with other fields than rank 1's; rank 0 refusing the
    arguments of ``a`` while the others agree on ``b``; an unhashable field."""
    me = ditron.world().rank
    errors = []
    with pytest.raises(ValueError) as info:
        if me == 0:
            gather("x", problem=None)
        else:
            agree("x", shape=(4,))
    errors.append(str(info.value))
    with pytest.raises(ValueError) as info:
        if me == 0:
            with refused_together("a", peers=True):
                raise ValueError("bad a")
        agree("b", shape=(4,))
    errors.append(str(info.value))
    with pytest.raises(TypeError) as info:
        agree("c", splits=[1, 2])
    errors.append(str(info.value))
    return errors


def test_messages_name_each_ranks_call(backend, monkeypatch):
    monkeypatch.setenv("DITRON_LAUNCH_TIMEOUT", "60")
    res = ditron.launch(_messages, 3, backend=backend)
    for rank, (fields, refused, unhashable) in enumerate(res):
        assert fields.endswith("  rank 0: x (fields: problem)\n  rank 1: x (fields: shape)\n"
                               "  rank 2: x (fields: shape)"), fields
        if rank == 0:
            assert refused == "bad a"
        else:
            assert refused == ("b: a rank refused the call's arguments:\n"
                               "  rank 0: (in a) ValueError: bad a")
        assert unhashable.startswith("c: the fields of an agreed call must be hashable"), \
            unhashable


def _unhashable_on_one_rank() -> list[str]:
    """Rank 0 passes a list (unhashable) where the others pass a tuple, in two calls; then
    every rank agrees normally (the gathers stay paired)."""
    me = ditron.world().rank
    errors = []
    for what in ("op", "other"):
        with pytest.raises((TypeError, ValueError)) as info:
            agree(what, splits=[1, 2] if me == 0 else (1, 2), n=3)
        errors.append(f"{type(info.value).__name__}: {info.value}")
    agree("op", splits=(1, 2), n=3)
    return errors


@pytest.mark.parametrize("world_size, debug", [(2, True), (3, True), (3, False)])
def test_a_field_unhashable_on_one_rank_raises_on_every_rank(world_size, debug, backend,
                                                             monkeypatch):
    """A field that one rank alone cannot hash: that rank raised ``TypeError`` alone and
    its peers waited in the call's gather (for ever outside debug mode); now it tells
    them there, and they raise ``ValueError`` naming it."""
    monkeypatch.setenv("DITRON_LAUNCH_TIMEOUT", "60")
    if not debug:  # no wait timeout, no check of every call: only a first call gathers
        monkeypatch.setenv("DITRON_WAIT_TIMEOUT", "0")
        monkeypatch.setenv("DITRON_CHECK_CALLS", "0")
    res = ditron.launch(_unhashable_on_one_rank, world_size, backend=backend)
    for rank, errors in enumerate(res):
        for what, error in zip(("op", "other"), errors, strict=True):
            own = (f"TypeError: {what}: the fields of an agreed call must be hashable "
                   f"(remember=False gathers them on every call): unhashable type: 'list'")
            told = f"ValueError: {what}: a rank refused the call's arguments:\n  rank 0: {own}"
            assert error == (own if rank == 0 else told), (rank, error)
