"""The torch modes every public op runs under, whatever the caller's.

- ``torch.no_grad``: an op records no autograd history (as torch.distributed's do); its
  differentiable forms are in ``ditron.nn``.
- autocast off on the ranks' device type: an op computes in its inputs' dtype and returns
  that dtype on every path (an overlapped kernel and the ``torch.matmul`` fallback alike);
  ``ditron.nn``'s linear functions cast for autocast before they call an op.
- ``torch.compiler.disable``: in a function that ``torch.compile`` traces, an op is a graph
  break and runs eagerly (Dynamo failed inside the ops' host code); the ops registered by
  ``ditron.nn`` (``torch.ops.ditron.*``) go into compiled graphs without a break.

Inference mode is left as the caller set it: state kept across calls is made outside it
(``docs/developing.md``, "The caller's torch modes").
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import ParamSpec, TypeVar

import torch

from ..runtime.world import current, is_initialized

P = ParamSpec("P")
R = TypeVar("R")


def public_op(fn: Callable[P, R]) -> Callable[P, R]:
    """Run ``fn`` with gradients and autocast off, never traced by Dynamo (see the module
    docstring)."""

    @functools.wraps(fn)
    def run(*args: P.args, **kwargs: P.kwargs) -> R:
        # before init the op itself raises its clear error; no device to pick yet
        device = current().world.device.type if is_initialized() else "cpu"
        grad, cast = torch.is_grad_enabled(), torch.is_autocast_enabled(device)
        if not (grad or cast):
            return fn(*args, **kwargs)
        # the setters, not the context managers: ~0.5 us a call where those took ~4
        torch.set_grad_enabled(False)
        if cast:
            torch.set_autocast_enabled(device, False)
        try:
            return fn(*args, **kwargs)
        finally:
            torch.set_grad_enabled(grad)
            if cast:
                torch.set_autocast_enabled(device, True)

    return torch.compiler.disable(run)
