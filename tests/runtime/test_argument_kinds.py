"""Arguments of the wrong kind for the runtime's entry points (a backend that is not a
name, a timeout that is a bool, a ``ReduceOp`` object) and the package's lazily loaded
modules: refused with a clear error, or taken as torch takes them."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest
import torch
import torch.distributed as dist

import ditron
from ditron.runtime.config import Settings, SettingsError


def _never() -> None:
    raise AssertionError("no rank should start")


@pytest.mark.parametrize("backend", [torch.device("cpu"), 1])
def test_a_backend_that_is_not_a_name_is_refused(backend):
    """``backend=torch.device("cpu")`` failed with ``AttributeError: 'torch.device' object
    has no attribute 'lower'``; now a ``SettingsError`` (a ``ValueError``) naming it,
    before any rank starts."""
    words = re.escape(f"unknown backend {backend!r}; choose one of cpu, cuda")
    with pytest.raises(SettingsError, match=words):
        ditron.init(backend)
    with pytest.raises(SettingsError, match=words):
        ditron.launch(_never, 2, backend=backend)
    assert not ditron.is_initialized()


def test_a_bool_wait_timeout_is_refused():
    """``init(wait_timeout=True)`` meant a one-second timeout; ``set_wait_timeout(True)``
    was already refused."""
    with pytest.raises(ValueError, match=re.escape("ditron.init(wait_timeout=...) must be a "
                                                   "number of seconds")):
        Settings.from_env("cpu", wait_timeout=True)
    assert Settings.from_env("cpu", wait_timeout=3).wait_timeout == 3.0


def _reduce_with_op_objects(seed: int) -> bool:
    w = ditron.world()
    x = torch.randn(5, 3, generator=torch.Generator().manual_seed(seed + w.rank))
    for member in (dist.ReduceOp.MAX, dist.ReduceOp.MIN, dist.ReduceOp.SUM):
        want = x.clone()
        dist.all_reduce(want, dist.ReduceOp(member))
        got = ditron.ops.all_reduce(x, op=dist.ReduceOp(member))
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
        scattered = ditron.ops.reduce_scatter(torch.cat([x] * w.world_size),
                                              op=dist.ReduceOp(member))
        torch.testing.assert_close(scattered, want, rtol=1e-5, atol=1e-5)
    return True


def test_reduce_op_objects_reduce_as_their_member():
    """torch.distributed takes ``ReduceOp(ReduceOp.MAX)`` as it takes ``ReduceOp.MAX``;
    the ops refused it as an unsupported reduction."""
    seed = int.from_bytes(os.urandom(4), "little")
    assert ditron.launch(_reduce_with_op_objects, 2, seed, backend="cpu") == [True, True]


def test_trace_is_reached_from_the_package():
    """docs/tp_gemm.md says ``ditron.trace.enable()``; after ``import ditron`` that was an
    ``AttributeError`` (the ops import the module only when they trace)."""
    code = ("import ditron\nditron.trace.enable()\nprint(ditron.trace.enabled())\n")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=300)
    assert run.stdout.strip() == "True", run.stderr[-2000:]
