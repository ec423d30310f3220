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

Conjugate and negative views (``z.conj()``, ``z.conj().imag``) are resolved before an op
sees them: its kernels move and read bits, and such a view's bits are not its values. An
input becomes a plain copy; an output (``out=``, ``recv``'s tensor) a plain copy that the
op writes and that is then copied back into the view, unless torch could not write the
view (:func:`write_refusal`): that one the op sees as it is, and refuses before anything
moves.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import ParamSpec, TypeVar

import torch

from ..runtime.tensor_spans import shares_memory
from ..runtime.world import current, is_initialized

P = ParamSpec("P")
R = TypeVar("R")


def public_op(fn: Callable[P, R]) -> Callable[P, R]:
    """Run ``fn`` with gradients and autocast off, never traced by Dynamo (see the module
    docstring)."""

    names = list(inspect.signature(fn).parameters)
    outputs = {i for i, name in enumerate(names) if name in _OUTPUTS}

    @functools.wraps(fn)
    def run(*args: P.args, **kwargs: P.kwargs) -> R:
        if _any_view_of_other_bits(args) or kwargs and _any_view_of_other_bits(
                kwargs.values()):
            return _on_plain_views(in_modes, outputs, args, kwargs)
        return in_modes(*args, **kwargs)

    def in_modes(*args: P.args, **kwargs: P.kwargs) -> R:
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


#: the parameters an op writes into (the rest are read)
_OUTPUTS = ("out", "x_or_shape")


def _view_of_other_bits(value: object) -> bool:
    return isinstance(value, torch.Tensor) and (value.is_neg() or value.is_conj())


def _any_view_of_other_bits(values) -> bool:
    """Whether a tensor of ``values`` is a conjugate or negative view; a plain loop, not
    ``any(map(...))``: it runs at every call of every op (~0.2 us a tensor)."""
    for value in values:
        if _view_of_other_bits(value):
            return True
    return False


def _on_plain_views(op: Callable[..., R], outputs: set[int], args: tuple,
                    kwargs: dict) -> R:
    """``op(*args, **kwargs)`` with its conjugate and negative views resolved (see the
    module docstring); what it returned in place of an output view is that view."""
    written: list[tuple[torch.Tensor, torch.Tensor]] = []

    def plain(value: object, output: bool) -> object:
        if not _view_of_other_bits(value) or output and write_refusal("", value):
            return value  # an output torch cannot write: the op refuses it, before moving
        resolved = value.resolve_conj().resolve_neg()
        if output:
            written.append((value, resolved))
        return resolved

    args = tuple(plain(a, i in outputs) for i, a in enumerate(args))
    kwargs = {k: plain(v, k in _OUTPUTS) for k, v in kwargs.items()}
    result = op(*args, **kwargs)
    for view, resolved in written:
        view.copy_(resolved)
        if result is resolved:
            result = view
    return result


def write_refusal(op: str, out: torch.Tensor) -> str | None:
    """Why ``out`` cannot be written mid-call (peers would then wait), or ``None``: its
    elements share memory (a dimension of stride 0, as from ``expand``, or strides that
    overlap, as from ``as_strided``: writes through them race, and no value of the result
    fits), or it is an inference tensor outside ``torch.inference_mode``."""
    if shares_memory(out):
        return (f"ditron.ops.{op}: out has elements that share memory (strides "
                f"{out.stride()} for shape {tuple(out.shape)}, e.g. from expand or "
                f"as_strided); pass a tensor whose elements are distinct")
    if out.is_inference() and not torch.is_inference_mode_enabled():
        return (f"ditron.ops.{op}: out was made under torch.inference_mode and torch writes "
                f"such tensors only inside that mode; call {op} inside it, or pass a tensor "
                f"made outside it")
    return None


def check_writable(op: str, out: torch.Tensor) -> None:
    """Raise ``ValueError`` where ``out`` cannot be written mid-call
    (:func:`write_refusal`)."""
    if (problem := write_refusal(op, out)) is not None:
        raise ValueError(problem)
