"""What ``tune.tuner.tune`` prints while it times (rank 0, on stderr): on a terminal, one
status line rewritten in place, each rewrite covering the last; in a log (not a terminal),
no carriage-return rewrites, one line per step. Timing is stubbed out: only the output is
under test."""

from __future__ import annotations

import io
from itertools import pairwise

import pytest
import torch

import ditron


class Stderr(io.StringIO):
    """A stand-in stderr that says whether it is a terminal."""

    def __init__(self, tty: bool) -> None:
        super().__init__()
        self.tty = tty

    def isatty(self) -> bool:
        return self.tty


def _printed(tty: bool) -> str:
    """What rank 0 printed while tuning GEMM-RS over several candidates (the calls and
    their timing stubbed: no op runs)."""
    import sys

    from ditron.tune import tuner

    tuner._call = lambda fn_op, a, b, op, trial: None
    tuner.time_calls = lambda fn, warmup, iters, dev, batch=1: [10.0] * iters
    sys.stderr = out = Stderr(tty)
    try:
        tuner.tune("gemm_rs", 32, 8, 8, torch.float32, warmup=0, iters=1, save=False,
                   progress=ditron.world().rank == 0)
    finally:
        sys.stderr = sys.__stderr__
    return out.getvalue()


@pytest.mark.parametrize("tty", [True, False])
def test_the_status_line_suits_where_it_goes(tty):
    """The status line was rewritten with ``\\r`` and three spaces of padding: a shorter
    label after a longer one left the longer one's tail on a terminal, and a log got every
    rewrite of the pass on one line (thousands of characters)."""
    text, quiet = ditron.launch(_printed, 2, tty, backend="cpu")
    assert quiet == ""  # rank 1 prints nothing
    status, _, summary = text.partition("\n[ditron tune]   ")
    assert "us  fallback colocated" in summary and "\r" not in summary
    if tty:
        steps = status.split("\r")[1:]
        assert len(steps) > 4 and len({len(s.rstrip()) for s in steps}) > 1, steps
        assert all(len(later) >= len(earlier) for earlier, later in pairwise(steps)), (
            "a rewrite left the end of a longer line behind")
    else:
        assert "\r" not in text
        assert all(len(line) < 200 for line in text.splitlines()), text
