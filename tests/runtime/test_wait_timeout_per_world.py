"""``ditron.set_wait_timeout`` sets the current world's timeout only (docs/language.md,
"Timeouts"): in a process holding several worlds the others keep theirs."""

from __future__ import annotations

import ditron

from ..language.kernels import wait_forever


def _timeout_in_one_world() -> tuple[str | None, int, int]:
    job = ditron.world()
    pair = ditron.init(group=[0, 1] if job.rank < 2 else [2, 3])
    ditron.set_wait_timeout(0.5)
    pad = ditron.signal_pad("test.per_world", 2)  # wait_forever waits on slot 1
    message = None
    if pair.rank == 1:  # nobody raises the signal: the pair's short timeout ends the wait
        wait_forever[(1,)](pad.signals, 3, ditron.context())
        try:
            ditron.check_waits()
        except ditron.WaitTimeoutError as e:
            message = str(e)
    pair_limit = ditron.context().spin_limit
    with ditron.use(job):
        job_limit = ditron.context().spin_limit
    return message, pair_limit, job_limit


def test_set_wait_timeout_sets_the_current_worlds_only(backend, monkeypatch):
    monkeypatch.setenv("DITRON_WAIT_TIMEOUT", "60")
    got = ditron.launch(_timeout_in_one_world, 4, backend=backend)
    for rank, (message, pair_limit, job_limit) in enumerate(got):
        if rank % 2:
            assert message is not None and "timed out after about 0.5 s" in message, got
        else:
            assert message is None, got
        # the job's world keeps the 60 s it was made with: 120 times the pair's polls
        assert job_limit == 120 * pair_limit > 0, got
