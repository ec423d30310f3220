"""No silent hangs: a wait that cannot complete raises with rank, signal, expected, seen."""

from __future__ import annotations

import time

import pytest
import torch

import ditron

from ..language.kernels import wait_forever


def _never_notified():
    pad = ditron.signal_pad("test.lonely", 2)
    w = ditron.world()
    if w.rank == 1:
        wait_forever[(1,)](pad.signals, 5, ditron.context())
        ditron.check_waits()


def test_wait_timeout_names_rank_signal_and_values(backend, monkeypatch):
    monkeypatch.setenv("DITRON_WAIT_TIMEOUT", "0.5")
    start = time.monotonic()
    with pytest.raises(ditron.WaitTimeoutError,
                       match=r"rank 1: wait on signal signals:test.lonely\[1\] timed out .*"
                             r"expected >= 5, saw 0") as info:
        ditron.launch(_never_notified, 2, backend=backend)
    assert (info.value.rank, info.value.expected, info.value.seen) == (1, 5, 0)
    assert time.monotonic() - start < 60


def _skip_barrier():
    ditron.barrier()
    if ditron.world().rank == 0:
        ditron.barrier()  # rank 1 never arrives


def test_barrier_with_missing_rank_times_out(backend, monkeypatch):
    monkeypatch.setenv("DITRON_WAIT_TIMEOUT", "0.5")
    expected = r"rank 0: wait on signal signals:barrier\[1\].*expected >= 2, saw 1"
    with pytest.raises(ditron.WaitTimeoutError, match=expected):
        ditron.launch(_skip_barrier, 2, backend=backend)


def _set_timeout_api():
    ditron.set_wait_timeout(0.2)
    pad = ditron.signal_pad("test.api", 2)
    with pytest.raises(ditron.WaitTimeoutError):
        wait_forever[(1,)](pad.signals, 1, ditron.context())
        ditron.check_waits()
    for bad in (-1, float("nan"), "5", float("inf")):  # nan once meant "wait forever"
        with pytest.raises(ValueError, match="wait timeout must be a number of seconds in"):
            ditron.set_wait_timeout(bad)
    # After the error the diagnostic record is clear again: a satisfiable wait passes.
    pad.signals[1] = 3
    wait_forever[(1,)](pad.signals, 3, ditron.context())
    ditron.check_waits()
    return True


def test_timeout_api(backend):
    assert ditron.launch(_set_timeout_api, 1, backend=backend) == [True]



def _block_wait():
    """A block wait returns once every unmasked signal is set, and times out naming the
    first signal still short."""
    from ..language.kernels import wait_block

    pad = ditron.signal_pad("test.block", 6)
    out = torch.zeros(1, dtype=torch.int64, device=ditron.world().device)
    ctx = ditron.context()
    pad.signals[:] = torch.tensor([5, 7, 5, 0, 9, 5])
    wait_block[(1,)](pad.signals, 5, 3, out, 8, ctx)  # slots 0-2 only
    ditron.check_waits()
    assert out.item() == 5
    ditron.set_wait_timeout(0.3)
    with pytest.raises(ditron.WaitTimeoutError,
                       match=r"signals:test.block\[3\] .*expected >= 5, saw 0"):
        wait_block[(1,)](pad.signals, 5, 6, out, 8, ditron.context())
        ditron.check_waits()
    return True


def test_block_wait(backend):
    assert ditron.launch(_block_wait, 1, backend=backend) == [True]


def _long_timeout() -> tuple[float, int, float]:
    """A timeout beyond the kernels' poll counter: the context gets the most polls it can
    count, and an error reports that wait, not the setting."""
    from ditron.language.context import DIAG_FLAG
    from ditron.runtime.world import MAX_POLLS, current

    rt = current()
    ditron.set_wait_timeout(1e6)
    rt.diag[DIAG_FLAG] = 1  # as a wait that gave up leaves it
    with pytest.raises(ditron.WaitTimeoutError) as info:
        ditron.check_waits()
    return info.value.timeout, ditron.context().spin_limit, MAX_POLLS / rt.backend.polls_per_second


def test_a_timeout_beyond_the_poll_counter_reports_the_real_wait():
    timeout, limit, most = ditron.launch(_long_timeout, 1, backend="cpu")[0]
    assert limit == 2**31 - 1 and timeout == most < 1e6


def _budget_of_the_wait() -> tuple[str, float]:
    """The error names the timeout the wait itself had (its context's), not the setting at
    the time of ``check_waits``: it once said "after about 0 s" once the timeout was off.
    ``set_wait_timeout`` takes any real number, NumPy's included (as ``ditron.init``)."""
    import numpy as np

    ditron.set_wait_timeout(np.float32(0.25))
    pad = ditron.signal_pad("test.budget", 2)
    wait_forever[(1,)](pad.signals, 1, ditron.context())
    ditron.set_wait_timeout(np.int64(0))
    with pytest.raises(ditron.WaitTimeoutError, match=r"timed out after about 0.25 s") as info:
        ditron.check_waits()
    return str(info.value), info.value.timeout


def test_timeout_error_reports_the_waits_own_budget(backend):
    # before, on CUDA: check_waits returned at once once the timeout was back at 0, so the
    # wait that gave up under the earlier budget went unreported
    message, timeout = ditron.launch(_budget_of_the_wait, 1, backend=backend)[0]
    assert timeout == 0.25, message
