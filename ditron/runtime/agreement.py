"""Checking that every rank makes the same collective call, before any transfer starts.

A collective call (an op, a megakernel's compile) that ranks make with different shapes or
options would leave some of them waiting for data that never comes. :func:`agree` gathers a
named signature of the call over the host group and raises on every rank, naming what
differs, when they disagree. :func:`raise_together` does the same for problems each rank
finds in its own data (the ops' debug checks, while :func:`checking_data`),
:func:`refused_together` for arguments a rank refuses before its call's agreement, and
:func:`rank0_decides` for a choice that rank 0 makes for all.
:func:`gather` is the agreement's gather for checks other than equality, :func:`share_agreed`
an agreement that also shares a few integers of each rank. All go through one host gather
format (``host_rows``): one small tensor gather when ranks agree.
"""

from __future__ import annotations

import pickle
from collections.abc import Callable, Hashable, Sequence
from typing import NoReturn, TypeVar

import numpy as np
import torch

from . import bounded_cache, host_rows
from .cuda_graphs import capturing
from .world import current

#: the bounded cache of the signatures this process has agreed on (the least recently used
#: forgotten past its capacity, on every rank alike: they are agreed on again)
_AGREED = "agreed_calls"
#: the field names a rank sends in its call's agreement gather instead of the call's own
#: when it refused its arguments (:func:`refused_together`); the one value is its error
_REFUSED = ("refused",)
#: the attribute marking an exception every rank of the call has been told about
_TOLD = "_ditron_told"

T = TypeVar("T")


def agree(what: str, *, remember: bool = True, **fields: Hashable) -> None:
    """Raise ``ValueError`` on every rank unless every rank passes equal ``fields`` (picklable
    values; tensors and NumPy arrays equal in dtype, shape and every element's bytes) for
    ``what`` (the call's name, e.g. ``"ditron.ops.all_gather"``).

    One small all-gather over the host group (``host_rows``; the fields themselves
    travel only where ranks differ; values written alike agree, a NaN too). ``remember``:
    a signature agreed on once costs a set lookup afterwards (unless a pickled copy of its
    values would not find it: a NaN, an object compared by identity; those are gathered
    on every call). A rank that then repeats an agreed call while another makes a
    new one is not caught there (the first skips the gather the second waits in, or, where
    both signatures were agreed before, neither gathers and the op moves mismatched data),
    unless ``DITRON_CHECK_CALLS`` (debug mode's default) gathers on every call; if the
    first then reaches another call's gather, both ranks raise, naming the calls each
    was in. Nothing is checked while ``torch.compile`` traces (a trace cannot gather; the
    compiled code runs without host checks). With ``remember``, fields that cannot be
    hashed are a ``TypeError`` on the rank passing them, told to its peers in the call's
    gather (:class:`refused_together`): they raise ``ValueError`` naming it. A world of one
    rank gathers nothing but raises that ``TypeError`` too (a ``hash`` of the fields), so
    code run at one rank fails as it would at several.
    """
    if torch.compiler.is_compiling():
        return  # a trace cannot gather: the compiled code runs without host checks
    rt = current()
    if rt.world.world_size == 1:
        if remember:
            _check_hashable(what, fields)
        return
    values = tuple(fields.values())
    key = (what, tuple(fields), values)
    agreed = bounded_cache.named(_AGREED)
    known = False
    if remember:
        try:
            known = agreed.get(key, False)
        except TypeError as exc:  # unhashable: named here, not as a bare TypeError
            _refuse_unhashable(what, exc)
        if known and not checks_every_call():
            return
    _agreed_rows(what, tuple(fields), values)
    if remember and not known and _comes_back_equal(key):
        agreed.put(key, True)


def _check_hashable(what: str, fields: dict) -> None:
    """Raise the ``TypeError`` :func:`agree` raises at several ranks where ``fields`` cannot
    be hashed (a world of one rank, which gathers nothing, refuses them alike)."""
    try:
        hash(tuple(fields.values()))
    except TypeError as exc:
        _refuse_unhashable(what, exc)


def _refuse_unhashable(what: str, exc: TypeError) -> NoReturn:
    """Raise ``TypeError`` for the unhashable fields (``exc``) of an agreed call ``what``,
    having told the peers in the call's gather (:class:`refused_together`), where they
    raise ``ValueError`` naming this rank's error: a rank whose value alone could not be
    hashed (a list where its peers passed a tuple) raised alone, and its peers waited in
    the gather for it (for ever outside debug mode)."""
    error = TypeError(f"{what}: the fields of an agreed call must be hashable "
                      f"(remember=False gathers them on every call): {exc}")
    with refused_together(what):
        raise error from None


def _comes_back_equal(key: tuple) -> bool:
    """Whether ``key`` equals (and hashes as) a copy of itself made by pickling: whether a
    later call with equal values finds it on every rank. A NaN (``nan != nan``; a tuple
    holding the very same NaN object equals itself), an object compared by identity or a
    tensor would be found by a rank passing the same object again and missed by one
    passing a new one, which then waited alone in a gather its peers skipped."""
    try:
        copy = pickle.loads(pickle.dumps(key))
        return hash(copy) == hash(key) and bool(copy == key)
    except Exception:  # noqa: BLE001 - not a plain value: gathered on every call
        return False


def disagreement(what: str, names: Sequence[str], every: Sequence[Sequence]) -> str:
    """The message for ranks whose ``names`` fields took the values ``every[rank]``: the
    fields that differ, then each rank's values."""
    differ = [n for i, n in enumerate(names)
              if not all(_same(v[i], every[0][i]) for v in every)]
    lines = "\n".join(f"  rank {r}: " + ", ".join(f"{n}={x!r}" for n, x in zip(names, v,
                                                                                 strict=True))
                      for r, v in enumerate(every))
    verb = "differs" if len(differ) == 1 else "differ"
    return f"{what}: ranks disagree on the call ({', '.join(differ)} {verb}):\n{lines}"


def _same(a: object, b: object) -> bool:
    """Whether two ranks' values of a field agree: equal, or written alike (``host_rows.
    digest``: a NaN, which equals nothing, and a tuple against a list of equal items).
    Tensors and NumPy arrays agree only written alike, dtype, shape and bytes: their
    ``==`` broadcasts (``tensor([1.])`` equalled ``tensor(1.)``)."""
    if not isinstance(a, (torch.Tensor, np.ndarray)) and not isinstance(
            b, (torch.Tensor, np.ndarray)):
        try:
            if a == b:
                return True
        except Exception:  # noqa: BLE001 - an ``==`` that does not give a bool
            pass
    return host_rows.digest(a) == host_rows.digest(b)


def raise_together(what: str, problem: str | None) -> None:
    """Raise ``ValueError`` on every rank when any rank found a ``problem`` (its message, or
    ``None``) in its own data: a check of values that ranks cannot agree on in advance
    (expert ids in range), where a rank raising alone would leave the others waiting for it.
    One host all-gather on every call; the message names each rank's problem."""
    rt = current()
    if rt.world.world_size > 1:
        kind = host_rows.OK if problem is None else host_rows.PROBLEM
        problems = [p for (p,) in _gather(what, ("problem",), (problem,), kind)]
    else:
        problems = [problem]
    if any(p is not None for p in problems):
        lines = "\n".join(f"  rank {r}: {p}" for r, p in enumerate(problems) if p is not None)
        raise _told(ValueError(f"{what}:\n{lines}"))


def checks_every_call() -> bool:
    """Whether :func:`agree` gathers on every call, not only on a signature's first:
    ``DITRON_CHECK_CALLS`` (on by default in debug mode), except while ``torch.compile``
    traces (a gather cannot be traced; the compiled code runs without host checks)."""
    return current().settings.check_calls and not torch.compiler.is_compiling()


def checking_data() -> bool:
    """Whether the calls that check their data on the host (:func:`raise_together`, one
    gather of every rank on every call: MoE's expert ids, a device all-to-all's
    ``send_index``) do so now: in debug mode (``DITRON_WAIT_TIMEOUT > 0``), not while a CUDA
    graph is captured or ``torch.compile`` traces (the ops then run later)."""
    return (current().wait_timeout > 0 and not capturing()
            and not torch.compiler.is_compiling())


def peers_gather(what: str, checks_data: bool = False) -> bool:
    """Whether the peers of a rank that refuses the arguments of a call ``what`` are (as
    far as it can tell) in one of that call's gathers: with ``DITRON_CHECK_CALLS`` (on
    by default in debug mode), where no call of ``what`` has been agreed yet (the agreed
    signatures are the same on every rank), or, for a call that ``checks_data`` after its
    agreement, while :func:`checking_data`. After an agreed call the peers may otherwise
    repeat it without a gather."""
    rt = current()
    if rt.world.world_size == 1:
        return False
    return checks_every_call() or checks_data and checking_data() or not any(
        key[0] == what for key in bounded_cache.named(_AGREED).keys())


class refused_together:  # noqa: N801 - used as a function: ``with refused_together(...)``
    """Run a call's checks of this rank's own arguments, made before the call's first
    :func:`agree` (or :func:`gather`, :func:`share_agreed`) on ``what``: where they raise,
    the rank first takes part in the host gather its peers make there, with its error, so
    that each of them raises ``ValueError`` naming the rank and its problem rather than
    waiting for it; then the error is raised here.

    ``peers``: whether the peers are in that gather (default :func:`peers_gather`; where
    they are not, having repeated an agreed call, the rank raises alone and they time out,
    as when a rank changes its shapes alone). ``checks_data``: the call's peers gather
    again after its agreement while :func:`checking_data` (a :func:`raise_together` check
    of their data, on every call): the rank then tells them in every call, not only before
    its signature was agreed (raising alone, it left them waiting in that gather, or
    taking its next call's gather for this one's). An exception every rank already raises
    (a disagreement) is not told again.
    (A class, not a generator: entering and leaving cost ~0.3 us, a quarter of
    ``contextlib.contextmanager``'s, on every call of the ops.)"""

    __slots__ = ("checks_data", "peers", "what")

    def __init__(self, what: str, peers: bool | None = None, *,
                 checks_data: bool = False) -> None:
        self.what, self.peers, self.checks_data = what, peers, checks_data

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind, exc, tb) -> bool:
        if not isinstance(exc, Exception) or getattr(exc, _TOLD, False):
            return False
        if not (peers_gather(self.what, self.checks_data) if self.peers is None
                else self.peers):
            return False
        _told(exc)
        problem = f"{type(exc).__name__}: {exc}"
        try:
            _gather(self.what, _REFUSED, (problem,), host_rows.REFUSED)
        except ValueError as told:  # what the peers raise; here the error itself
            if not getattr(told, _TOLD, False):
                raise
        return False


def _told(exc: BaseException) -> BaseException:
    """``exc``, marked as raised on every rank of its call."""
    setattr(exc, _TOLD, True)
    return exc


def rank0_decides(what: str, decide: Callable[[], T]) -> T:
    """``decide()`` run on rank 0 and its (picklable) result given to every rank (the host
    rows, ``host_rows``, with rank 0's decision in the gather that follows them): a choice
    ranks must share that reads rank 0's own state (its tuning cache on disk). Where
    ``decide`` raises on rank 0, it raises there and every other rank raises
    ``RuntimeError`` naming it, instead of waiting for a result that never comes; where
    its result cannot be pickled, every rank raises ``ValueError`` naming it."""
    rt = current()
    if rt.world.world_size == 1:
        return decide()
    error, mine = None, None
    if rt.world.rank == 0:
        try:
            mine = (decide(), None)
        except Exception as exc:  # noqa: BLE001 - told to every rank, re-raised here
            error = exc
            mine = (None, f"{type(exc).__name__}: {exc}")
    every = _gather(what, ("decision",), (mine,), host_rows.FIELDS)
    if error is not None:
        raise error
    value, problem = every[0][0]
    if problem is not None:
        raise RuntimeError(f"{what}: rank 0 failed to decide for every rank: {problem}")
    return value


def gather(what: str, **fields: object) -> list[tuple]:
    """Every rank's ``fields`` values, in rank order (no caching), for a check of call
    ``what`` other than equality (ranks whose values must pair up). Raises ``ValueError``
    on every rank where a rank refused its arguments in :func:`refused_together` of
    ``what``, ranks are in different calls or a rank's values cannot be pickled."""
    return _gather(what, tuple(fields), tuple(fields.values()), host_rows.FIELDS)


def share_agreed(what: str, ints: Sequence[int], **fields: Hashable) -> list[list[int]]:
    """Every rank's ``ints`` (at most ``1 + 2 W`` integers), in rank order, from the same
    host gather that checks, as ``agree(what, remember=False, **fields)`` does, that every
    rank passes equal ``fields`` (all_to_all's split sizes with its row shape and dtype)."""
    rt = current()
    if rt.world.world_size == 1:
        return [list(ints)]
    return _agreed_rows(what, tuple(fields), tuple(fields.values()), ints).payloads


def _agreed_rows(what: str, names: tuple[str, ...], values: tuple,
                 payload: Sequence[int] = ()) -> host_rows.Rows:
    """The rows of a check that every rank passes equal ``values``; raises on every rank
    where they differ, a rank refused or ranks are in different calls."""
    rows = _rows(what, names, values, host_rows.OK, payload)
    if rows.calls is not None:
        every = [call[2] for call in rows.calls]
        if not all(_same(a, b) for v in every for a, b in zip(v, every[0], strict=True)):
            raise _told(ValueError(disagreement(what, names, every)))
    return rows


def _gather(what: str, names: tuple[str, ...], values: tuple, kind: int) -> list[tuple]:
    """Every rank's ``values``, after checking that all ranks are in the same call ``what``
    with the same field ``names`` (``kind``: this rank's row kind, ``host_rows``)."""
    rows = _rows(what, names, values, kind)
    if rows.calls is None:  # every rank's values digest equals this rank's
        return [values] * len(rows.kinds)
    return [call[2] for call in rows.calls]


def _rows(what: str, names: tuple[str, ...], values: tuple, kind: int,
          payload: Sequence[int] = ()) -> host_rows.Rows:
    """``host_rows.exchange`` over the host group, raising on every rank where a rank
    refused its arguments or ranks are in different calls."""
    rt = current()
    if rt.world.world_size == 1:
        return host_rows.Rows([kind], [list(payload)], None)
    rows = host_rows.exchange(rt.host_group, what, names, values, kind, payload)
    if rows.calls is None:
        return rows
    refused = [(r, call) for r, (k, call) in enumerate(zip(rows.kinds, rows.calls,
                                                            strict=True))
               if k == host_rows.REFUSED]
    if refused:  # naming the call a rank refused where it is not this rank's
        lines = "\n".join(f"  rank {r}: " + (f"(in {call[0]}) " if call[0] != what else "")
                          + f"{call[2][0]}" for r, call in refused)
        raise _told(ValueError(f"{what}: {'a rank' if len(refused) == 1 else 'ranks'} "
                               f"refused the call's arguments:\n{lines}"))
    if (calls := rows.different_calls()) is not None:
        raise _told(ValueError(f"{what}: ranks are in different collective calls (one "
                               f"repeated a call it had checked before while another made a "
                               f"new one, or they call ops in different orders):\n{calls}"))
    if (unsent := rows.unsent()) is not None:
        raise _told(ValueError(f"{what}: field values that cannot be pickled, so not sent "
                               f"to the other ranks:\n{unsent}"))
    return rows
