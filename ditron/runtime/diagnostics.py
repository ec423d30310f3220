"""Turning a device ``wait`` that gave up into a host exception."""

from __future__ import annotations

import numbers

from ..language.context import (
    DIAG_EXPECTED,
    DIAG_FLAG,
    DIAG_LIMIT,
    DIAG_OFFSET,
    DIAG_RANK,
    DIAG_SEEN,
)
from .config import MAX_SECONDS
from .world import current


class WaitTimeoutError(RuntimeError):
    """A device ``wait`` ran out of its poll budget (``DITRON_WAIT_TIMEOUT``)."""

    def __init__(self, rank: int, signal: str, expected: int, seen: int, timeout: float):
        self.rank, self.signal, self.expected, self.seen = rank, signal, expected, seen
        self.timeout = timeout
        super().__init__(
            f"rank {rank}: wait on signal {signal} timed out after about {timeout:g} s: "
            f"expected >= {expected}, saw {seen}. Nobody raised it (a peer, or this rank "
            f"itself for its own chunks): check that every "
            f"rank makes the same collective calls in the same order (DITRON_CHECK_CALLS=1, "
            f"the default with a wait timeout, compares every call's shapes across ranks).")

    def __reduce__(self):
        return type(self), (self.rank, self.signal, self.expected, self.seen, self.timeout)


def check_waits() -> None:
    """Raise :class:`WaitTimeoutError` if a ``wait`` of this rank has given up.

    Synchronises the device first. Ditron's own operators call this after each launch
    when a timeout is configured; call it after your own kernels in debug runs.
    """
    rt = current()
    if not rt.timed and rt.world.backend != "cpu":
        return  # no wait of this world could give up
    rt.backend.synchronize(rt.world.device)
    record = rt.diag.tolist()
    if record[DIAG_FLAG] == 0:
        return
    rt.diag.zero_()
    # the budget of the wait that gave up (its context's), not today's setting
    limit = int(record[DIAG_LIMIT])
    raise WaitTimeoutError(
        rank=int(record[DIAG_RANK]),
        signal=rt.heap.describe(int(record[DIAG_OFFSET])),
        expected=int(record[DIAG_EXPECTED]),
        seen=int(record[DIAG_SEEN]),
        timeout=limit / rt.backend.polls_per_second if limit > 0 else rt.wait_seconds,
    )


def set_wait_timeout(seconds: float) -> None:
    """Set how long device waits spin before giving up (0: forever; a count of polls, at
    most ``world.MAX_POLLS``: about 1070 s on CUDA) in the current world; takes effect for
    its contexts built afterwards (``ditron.context()``); other worlds of the process keep
    their own."""
    if isinstance(seconds, bool) or not isinstance(seconds, numbers.Real) \
            or not 0 <= seconds <= MAX_SECONDS:  # also refuses nan and inf
        raise ValueError(f"wait timeout must be a number of seconds in [0, {MAX_SECONDS:g}], "
                         f"got {seconds!r}")
    current().wait_timeout = float(seconds)
