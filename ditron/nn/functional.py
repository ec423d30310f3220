"""Differentiable tensor-parallel building blocks on Ditron's overlapped ops.

Weights are in ``torch.nn.Linear``'s layout (``[out_features, in_features]``). ``W`` is the
world size; "rows" is dim 0 (the sequence in sequence parallelism: a tensor ``[s, b, h]``
split by ``s``); inputs may have any number of dims, the last one being the features.

| function | forward | backward (of the input) |
|---|---|---|
| ``all_gather_linear`` | ``all_gather(x) @ w.T + b`` (``ag_gemm``) | ``gemm_rs(g, w)`` |
| ``linear_reduce_scatter`` | ``reduce_scatter(x @ w.T) + b`` (``gemm_rs``) | ``ag_gemm(g, w)`` |
| ``linear_all_reduce`` | ``all_reduce(x @ w.T) + b`` (``gemm_ar``) | ``g @ w`` |
| ``all_gather(x)`` | ``all_gather(x)`` | ``reduce_scatter(g)`` |
| ``reduce_scatter(x)`` | ``reduce_scatter(x)`` | ``all_gather(g)`` |
| ``all_reduce(x)`` | ``all_reduce(x)`` | ``g`` |
| ``copy_to_tensor_parallel(x)`` | ``x`` | ``all_reduce(g)`` |

The conventions are Megatron-LM's: a replicated tensor's gradient is the same on every rank
and already complete (so ``all_reduce`` passes it through), and the gradient of a
replicated input to sharded work is the sum of the shards' parts (``copy_to_tensor_parallel``).
Weight gradients are complete on the rank that owns the shard. The bias of
``linear_reduce_scatter`` is replicated while its output is split by rows, so its gradient
is all-reduced in the backward pass: every rank gets the whole gradient.

Under ``torch.autocast`` the linear functions compute in its dtype, as
``torch.nn.functional.linear`` does; as there, float64 operands are not cast (and refused:
the functions compute in float16, bfloat16 or float32). Every function is a collective:
all ranks call it in the same order (forward and backward) with matching shapes (the
linear functions check their inputs' whole shapes, not only rows x features: an input of
``[2, 3, h]`` on one rank and ``[3, 2, h]`` on another raises on both) and, where it decides
the collectives of the backward pass, on which operands need a gradient (``requires_grad``
with grad mode on): ``x`` and ``weight`` of ``all_gather_linear`` (and ``keep_gathered``
where the weight needs one), ``x``, ``weight`` and ``bias`` of ``linear_reduce_scatter``,
``x`` of ``all_gather``, ``reduce_scatter`` and ``copy_to_tensor_parallel``. Ranks that
differ there (one under ``torch.no_grad()``, or a tensor that requires grad on one rank
only) raise ``ValueError`` on every rank at the forward call, naming each rank's
``needs_grad``: in the backward pass one rank made a collective that its peers did not,
and waited for ever. ``linear_all_reduce`` and ``all_reduce`` have no collective in their
backward pass: their ranks may differ there. It runs in
the world current at its forward call, backward included (``ditron.use``: the backward of a
TP layer stays in the TP world when another world is current by then). ``method`` is
passed to the op (``"auto"``, ``"overlap"``, ``"fallback"``). A rank that refuses its
arguments (``ValueError``) tells its peers, which raise too instead of waiting for it in the
op (as the ops do). ``copy_to_tensor_parallel`` returns its input as it is (a view of it,
as Megatron-LM's returns the input itself): torch refuses an in-place edit of a custom
Function's view output, so clone it first to edit it in place.
Gradients are first order only: a double backward (``create_graph=True``) raises, as the
conventions above hold for a replicated first-order gradient only.
"""

from __future__ import annotations

import contextlib
from collections.abc import Hashable, Sequence
from typing import NoReturn

import torch
from torch.autograd.function import once_differentiable

from ..ops.tp_gemm import DTYPES
from ..runtime.agreement import agree, refused_together
from ..runtime.world import world
from . import library  # registers torch.ops.ditron.*

_ditron = torch.ops.ditron

#: the functions whose forward agrees (:func:`_agree`) on every call, not only on inputs of
#: more than 2 dims: which of their operands need a gradient decides the collectives of
#: their backward pass
_GRADS_AGREED = frozenset({"all_gather_linear", "linear_reduce_scatter", "all_gather",
                           "reduce_scatter", "copy_to_tensor_parallel"})


def _first_check(name: str, x: torch.Tensor) -> str:
    """The agreement ``ditron.nn.<name>``'s forward with input ``x`` enters first."""
    if name in _GRADS_AGREED or isinstance(x, torch.Tensor) and x.dim() > 2:
        return f"ditron.nn.{name}"
    return "ditron.ops.gemm_ar"  # linear_all_reduce's op


def _refuse(name: str, x: torch.Tensor, problem: str) -> NoReturn:
    """Raise ``ValueError`` for this rank's arguments to ``ditron.nn.<name>`` (input ``x``)."""
    _refuse_with(name, x, ValueError(f"ditron.nn.{name}: {problem}"))


def _refuse_with(name: str, x: torch.Tensor, exc: Exception) -> NoReturn:
    """Raise ``exc``, this rank's refusal of its arguments to ``ditron.nn.<name>`` (input
    ``x``), after telling the peers, which wait in the agreement it enters first: they
    raise too (``runtime.agreement.refused_together``) instead of waiting for this rank."""
    if torch.compiler.is_compiling():  # refused while tracing: no host gather in a graph
        raise exc
    with refused_together(_first_check(name, x)):
        raise exc


def needs_grad(**operands: torch.Tensor | Sequence[torch.Tensor] | None) -> tuple[str, ...]:
    """The names of ``operands`` that autograd differentiates in this call: a tensor that
    requires grad (for a sequence: one of its tensors), grad mode on. Where these decide
    the collectives of a backward pass, every rank must have the same (the functions agree
    on them at the forward call): a rank differing made a collective its peers did not."""
    if not torch.is_grad_enabled():
        return ()
    return tuple(name for name, t in operands.items()
                 if any(isinstance(u, torch.Tensor) and u.requires_grad
                        for u in (t if isinstance(t, (list, tuple)) else (t,))))


def _agree(name: str, x: torch.Tensor, **fields: Hashable) -> None:
    """Every rank calls ``ditron.nn.<name>`` with an input of the same shape and equal
    ``fields`` (``needs_grad``: the operands whose gradients decide the backward pass's
    collectives, given for the functions of ``_GRADS_AGREED`` only). The op agrees on the
    input's 2-D ``[rows, features]`` form only: ranks passing ``[2, 3, h]`` and
    ``[3, 2, h]`` ran, each viewing the others' rows in its own shape. Without ``fields``
    a 2-D input is the op's own (no second check). A cached agreement (one lookup per call
    once agreed, ``runtime.agreement.agree``); not while ``torch.compile`` traces."""
    if (fields or x.dim() > 2) and not torch.compiler.is_compiling():
        agree(f"ditron.nn.{name}", shape=tuple(x.shape), **fields)


def _tensors(name: str, **operands: object) -> None:
    """Refuse (on every rank) operands of ``ditron.nn.<name>`` that are not tensors (a
    ``bias`` may be ``None``): reading them raised ``AttributeError`` on this rank alone,
    its peers waiting for it in the agreement."""
    for what, t in operands.items():
        if not isinstance(t, torch.Tensor) and not (what == "bias" and t is None):
            _refuse(name, operands["x"], f"{what} must be a torch.Tensor, got "
                                         f"{type(t).__name__}")


def _rows(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None,
          name: str, min_dims: int = 1) -> torch.Tensor:
    """``x`` as a 2-D ``[rows, in_features]`` tensor, after the checks a layer can make."""
    if x.dim() < min_dims:
        _refuse(name, x, f"input must have at least {min_dims} dims (rows first, "
                         f"features last), got {tuple(x.shape)}")
    if weight.dim() != 2:
        _refuse(name, x, f"weight must be 2-D [out, in], got {tuple(weight.shape)}")
    if x.shape[-1] != weight.shape[1]:
        _refuse(name, x, f"input's last dim must match the {weight.shape[1]} input features "
                         f"of this rank's weight {tuple(weight.shape)}, got input "
                         f"{tuple(x.shape)}")
    if bias is not None and bias.shape != (weight.shape[0],):
        _refuse(name, x, f"bias must be [{weight.shape[0]}], got {tuple(bias.shape)}")
    if x.dtype != weight.dtype:
        _refuse(name, x, f"input dtype {x.dtype} != weight dtype {weight.dtype}")
    if weight.dtype not in DTYPES:  # torch.autocast leaves float64 operands as they are
        _refuse(name, x, f"computes in {', '.join(str(t) for t in DTYPES)}, got "
                         f"{weight.dtype} (torch.autocast does not cast float64, as for "
                         f"torch's own ops)")
    if bias is not None and (bias.dtype, bias.device) != (weight.dtype, weight.device):
        _refuse(name, x, f"bias ({bias.dtype} on {bias.device}) must have the weight's "
                         f"dtype and device ({weight.dtype} on {weight.device})")
    return x.reshape(-1, x.shape[-1])


def _autocast(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, name: str):
    """Under ``torch.autocast``, the operands in its dtype (as ``torch.nn.functional.linear``
    would compute them; the casts are differentiable, so fp32 weights get fp32 gradients),
    and a context that turns autocast off around the op (it keeps its own dtypes)."""
    if x.device != weight.device:
        _refuse(name, x, f"input on {x.device}, weight on {weight.device}")
    kind = x.device.type
    if kind not in ("cpu", "cuda") or not torch.is_autocast_enabled(kind):
        return x, weight, bias, contextlib.nullcontext()
    dtype = torch.get_autocast_dtype(kind)
    cast = (autocast_operand(x, kind, dtype), autocast_operand(weight, kind, dtype),
            None if bias is None else autocast_operand(bias, kind, dtype))
    return (*cast, torch.autocast(kind, enabled=False))


def autocast_operand(t: torch.Tensor, kind: str, dtype: torch.dtype) -> torch.Tensor:
    """``t`` as ``torch.autocast(kind, dtype)`` casts an operand of a lower-precision op
    (its ``is_eligible``): a floating-point tensor on device type ``kind`` in ``dtype``,
    except float64, which stays float64, as every other tensor stays as it is."""
    if not t.is_floating_point() or t.dtype == torch.float64 or t.device.type != kind:
        return t
    return t.to(dtype)


def _split_rows(x: torch.Tensor, name: str) -> None:
    W = world().world_size
    if x.dim() == 0 or x.shape[0] % W:
        _refuse(name, x, f"dim 0 of {tuple(x.shape)} does not split over {W} ranks")


# The Functions below take no bias: it is added outside them by plain autograd, as an
# in-place add on a Function's output gives wrong gradients under torch.compile in torch
# 2.11 (pytorch/pytorch#180642). Their backward passes are ``once_differentiable``: a
# second-order gradient through them would take a rank's own part of a gradient for the
# replicated whole (``_LinearAllReduce`` gave wrong values silently).


class _AllGatherLinear(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x2, weight, keep_gathered: bool, method: str, key: str):
        ctx.method, ctx.key = method, key
        ctx.kept = keep_gathered and ctx.needs_input_grad[1]
        if ctx.kept:
            y, gathered = _ditron.ag_gemm_gathered(x2, weight.t(), method, key)
            ctx.save_for_backward(gathered, weight)
        else:
            y = _ditron.ag_gemm(x2, weight.t(), method, key)
            ctx.save_for_backward(x2, weight)
        return y

    @staticmethod
    @once_differentiable
    def backward(ctx, gy):
        rows, weight = ctx.saved_tensors
        gy = gy.contiguous()
        gx = gw = None
        if ctx.needs_input_grad[0]:
            gx = _ditron.gemm_rs(gy, weight, ctx.method, ctx.key)
        if ctx.needs_input_grad[1]:
            gathered = rows if ctx.kept else _ditron.all_gather(rows, ctx.key)
            gw = gy.t() @ gathered
        return gx, gw, None, None, None


class _LinearReduceScatter(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x2, weight, method: str, key: str):
        ctx.method, ctx.key = method, key
        ctx.save_for_backward(x2, weight)
        return _ditron.gemm_rs(x2, weight.t(), method, key)

    @staticmethod
    @once_differentiable
    def backward(ctx, gy):
        x2, weight = ctx.saved_tensors
        gy = gy.contiguous()
        need_x, need_w = ctx.needs_input_grad[:2]
        gx = gw = None
        if need_x and need_w:
            gx, gathered = _ditron.ag_gemm_gathered(gy, weight, ctx.method, ctx.key)
            gw = gathered.t() @ x2
        elif need_x:
            gx = _ditron.ag_gemm(gy, weight, ctx.method, ctx.key)
        elif need_w:
            gw = _ditron.all_gather(gy, ctx.key).t() @ x2
        return gx, gw, None, None


class _LinearAllReduce(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x2, weight, method: str, key: str):
        ctx.save_for_backward(x2, weight)
        return _ditron.gemm_ar(x2, weight.t(), method, key)

    @staticmethod
    @once_differentiable
    def backward(ctx, gy):
        x2, weight = ctx.saved_tensors
        gx = gy @ weight if ctx.needs_input_grad[0] else None
        gw = gy.t() @ x2 if ctx.needs_input_grad[1] else None
        return gx, gw, None, None


class _AllGather(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, key: str):
        ctx.key = key
        return _ditron.all_gather(x, key)

    @staticmethod
    @once_differentiable
    def backward(ctx, g):
        return _ditron.reduce_scatter(g.contiguous(), ctx.key), None


class _ReduceScatter(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, key: str):
        ctx.key = key
        return _ditron.reduce_scatter(x, key)

    @staticmethod
    @once_differentiable
    def backward(ctx, g):
        return _ditron.all_gather(g.contiguous(), ctx.key), None


class _AllReduce(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, key: str):
        return _ditron.all_reduce(x, key)

    @staticmethod
    @once_differentiable
    def backward(ctx, g):
        return g, None


class _CopyToTensorParallel(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, key: str):
        ctx.key = key
        return x.view_as(x)

    @staticmethod
    @once_differentiable
    def backward(ctx, g):
        return _ditron.all_reduce(g.contiguous(), ctx.key), None


def all_gather_linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None,
                      *, keep_gathered: bool = True, method: str = "auto") -> torch.Tensor:
    """Column-parallel linear on a sequence-parallel input, by ``ag_gemm``.

    ``x``: this rank's rows ``[m, ..., in]``; ``weight``: this rank's output features
    ``[out/W, in]``; ``bias``: ``[out/W]``. Returns ``[W*m, ..., out/W]``: every rank's
    rows (rank order) times this rank's columns. ``keep_gathered`` keeps the gathered input
    from the forward pass for the weight's gradient (memory ``W*m x in``); otherwise the
    backward pass gathers it again.
    """
    _tensors("all_gather_linear", x=x, weight=weight, bias=bias)
    x, weight, bias, plain = _autocast(x, weight, bias, "all_gather_linear")
    x2 = _rows(x, weight, bias, "all_gather_linear", 2)
    grads = needs_grad(x=x, weight=weight)  # backward: gemm_rs; all_gather unless kept
    keep = bool(keep_gathered) and "weight" in grads  # no gathered copy without its use
    _agree("all_gather_linear", x, needs_grad=grads, keep_gathered=keep)
    key = library.world_key()
    with plain:
        y = _AllGatherLinear.apply(x2, weight, keep, method, key)
    if bias is not None:
        y = y + bias
    return y.view(library.world_size(key) * x.shape[0], *x.shape[1:-1], weight.shape[0])


def linear_reduce_scatter(x: torch.Tensor, weight: torch.Tensor,
                          bias: torch.Tensor | None = None, *,
                          method: str = "auto") -> torch.Tensor:
    """Row-parallel linear whose output is split by rows (sequence parallel), by ``gemm_rs``.

    ``x``: ``[M, ..., in/W]`` (all rows, this rank's input features); ``weight``:
    ``[out, in/W]``; ``bias``: ``[out]``, the same on every rank. Returns this rank's
    ``[M/W, ..., out]`` slice of the sum over ranks. ``M`` must divide by ``W``.
    """
    _tensors("linear_reduce_scatter", x=x, weight=weight, bias=bias)
    x, weight, bias, plain = _autocast(x, weight, bias, "linear_reduce_scatter")
    x2 = _rows(x, weight, bias, "linear_reduce_scatter", 2)
    _split_rows(x, "linear_reduce_scatter")
    # backward: ag_gemm(_gathered) or all_gather by the needs of x and weight; the bias's
    # all_reduce
    _agree("linear_reduce_scatter", x, needs_grad=needs_grad(x=x, weight=weight, bias=bias))
    key = library.world_key()
    with plain:
        y = _LinearReduceScatter.apply(x2, weight, method, key)
    if bias is not None:  # replicated, while the rows are split: its gradient is summed
        y = y + _CopyToTensorParallel.apply(bias, key)  # its need agreed above
    return y.view(x.shape[0] // library.world_size(key), *x.shape[1:-1], weight.shape[0])


def linear_all_reduce(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None,
                      *, method: str = "auto") -> torch.Tensor:
    """Row-parallel linear with a replicated output, by ``gemm_ar``.

    ``x``: ``[..., in/W]``; ``weight``: ``[out, in/W]``; ``bias``: ``[out]``, the same on
    every rank. Returns ``[..., out]``, the sum over ranks, on every rank.
    """
    _tensors("linear_all_reduce", x=x, weight=weight, bias=bias)
    x, weight, bias, plain = _autocast(x, weight, bias, "linear_all_reduce")
    x2 = _rows(x, weight, bias, "linear_all_reduce")
    _agree("linear_all_reduce", x)
    with plain:
        y = _LinearAllReduce.apply(x2, weight, method, library.world_key())
    if bias is not None:
        y = y + bias
    return y.view(*x.shape[:-1], weight.shape[0])


def all_gather(x: torch.Tensor) -> torch.Tensor:
    """Every rank's ``x`` concatenated along dim 0; backward: reduce-scatter."""
    _tensors("all_gather", x=x)
    _agree("all_gather", x, needs_grad=needs_grad(x=x))
    return _AllGather.apply(x, library.world_key())


def reduce_scatter(x: torch.Tensor) -> torch.Tensor:
    """This rank's slice (dim 0) of the sum over ranks; backward: all-gather."""
    _tensors("reduce_scatter", x=x)
    _split_rows(x, "reduce_scatter")
    _agree("reduce_scatter", x, needs_grad=needs_grad(x=x))
    return _ReduceScatter.apply(x, library.world_key())


def all_reduce(x: torch.Tensor) -> torch.Tensor:
    """The sum over ranks; backward passes the (replicated) gradient through."""
    return _AllReduce.apply(x, library.world_key())


def copy_to_tensor_parallel(x: torch.Tensor) -> torch.Tensor:
    """``x`` itself; backward sums the gradient over ranks (a replicated input feeding
    sharded work)."""
    _tensors("copy_to_tensor_parallel", x=x)
    _agree("copy_to_tensor_parallel", x, needs_grad=needs_grad(x=x))
    return _CopyToTensorParallel.apply(x, library.world_key())
