"""Expert parallelism with autograd: differentiable dispatch, grouped GEMM, combine, and an
expert-parallel MLP module.

Backward rules (``g``: the output's gradient; copy ``(t, j)``: token ``t``'s ``j``-th expert):

- ``moe_dispatch(x, ids, E)``: each copy's gradient goes back to its token's rank;
  ``dx[t]`` is their sum;
- ``grouped_gemm(x, w, offsets)``: ``dx_g = g_g @ w[g].T``, ``dw[g] = x_g.T @ g_g``;
- ``moe_combine(y, d, weights)``: ``dy(t, j) = weights[t, j] * g[t]``, sent to the copy's
  expert; ``dweights[t, j] = <g[t], y(t, j)>``.

A dropped or unrouted copy has zero gradient. The expert weights' gradients are complete
on the rank that holds the experts (every token routed to them contributes). Every function
is a collective (all ranks call it, forward and backward, in the same order) and runs its
backward in the world of its forward (``ditron.use``). The functions compute in their
inputs' dtype; ``ExpertParallelMLP`` follows ``torch.autocast`` as ``torch.nn.Linear``
does (fp32 weights, GEMMs in the autocast dtype, fp32 weight gradients). They call the
custom ops ``torch.ops.ditron.moe_*`` and ``grouped_gemm*`` with their autograd formulas
(``library.py``). ``torch.compile`` traces them, and ``ExpertParallelMLP``, into one graph
(``fullgraph=True``), on the CPU backend and on CUDA.

Ranks must agree on which operands need a gradient (``requires_grad`` with grad mode on),
as that decides the collectives of the backward pass: ``x`` of ``moe_dispatch``, ``y`` and
``topk_weights`` of ``moe_combine``, and for ``ExpertParallelMLP`` ``x``, ``topk_weights``
and the experts' outputs (which need one where ``x``, ``w1``, ``w2`` or an ``activation``
module's parameters do). Ranks that differ (one under ``torch.no_grad()``, a tensor that
requires grad on one rank only, one rank's experts frozen where ``x`` needs no gradient)
raise ``ValueError`` on every rank at the forward call, before any kernel, naming each
rank's ``needs_grad`` (in the backward pass one rank made a collective its peers did not,
and waited for ever).
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
from collections.abc import Callable, Sequence

import torch

from ..ops.moe import (
    GEMM_DTYPES,
    MoEDispatch,
    check_combine,
    check_topk_weights,
    mean_rows_per_expert,
)
from ..runtime.agreement import agree, refused_together
from ..runtime.integers import as_int, check_int
from ..runtime.world import world
from . import library
from .functional import autocast_operand, needs_grad
from .linear import in_world, shard_generator

_ditron = torch.ops.ditron


def _before_dispatch(check: Callable[[], None], what: str) -> None:
    """Run ``check`` (this rank's checks of its arguments, made before the dispatch); where
    it raises, the peers, which wait in the call's agreement ``what`` (or, in debug mode, in
    the dispatch's check of the expert ids), raise too
    (``runtime.agreement.refused_together``) instead of waiting for this rank."""
    try:
        check()
    except Exception:
        if torch.compiler.is_compiling():  # refused while tracing: no host gather in a graph
            raise
        with refused_together(what, checks_data=True):
            raise


def _is_int(value: object) -> bool:
    """Whether ``value`` is an integer argument (``runtime.integers``) or a symbolic one
    (``torch.compile`` makes changing ints ``SymInt``)."""
    return as_int(value) is not None or isinstance(value, torch.SymInt)


def _dispatch(x: torch.Tensor, topk_ids: torch.Tensor, num_experts: int,
              max_tokens: int | None, max_recv_rows: int | None, what: str,
              needs: tuple[str, ...]) -> tuple[torch.Tensor, list[torch.Tensor], list[int]]:
    """``(grouped x, routing, sizes)`` of the differentiable dispatch (``library``'s
    lists), the call ``what`` (``ditron.nn.moe.moe_dispatch`` or the layer) agreed first on
    ``needs`` (``needs_grad``: the operands whose gradients decide the backward pass's
    collectives)."""
    key = library.world_key()

    def check() -> None:  # the op's own checks, before the defaults below read them
        if not isinstance(x, torch.Tensor):  # before the agreement on its gradient's need
            raise TypeError(f"moe_dispatch: x must be a torch.Tensor [tokens, hidden], got "
                            f"{type(x).__name__}")
        if not isinstance(topk_ids, torch.Tensor) or topk_ids.dim() != 2:
            raise ValueError(f"moe_dispatch: topk_ids must be [tokens, k], got "
                             f"{getattr(topk_ids, 'shape', topk_ids)!r}")
        # a float or a string here failed in the custom op's schema (a RuntimeError on this
        # rank only, the peers waiting in the op's agreement) or, multiplied into the
        # default capacity, became another value
        for name, value in (("num_experts", num_experts), ("max_tokens", max_tokens),
                            ("max_recv_rows", max_recv_rows)):
            if (value is not None or name == "num_experts") and not _is_int(value):
                raise ValueError(f"moe_dispatch: {name} must be an int, got {value!r}")

    _before_dispatch(check, what)
    agree(what, needs_grad=needs)
    T, k = topk_ids.shape
    max_tokens = T if max_tokens is None else max_tokens
    cap = library.world_size(key) * max_tokens * k if max_recv_rows is None else max_recv_rows
    grouped, *routing = _ditron.moe_dispatch(x, topk_ids, num_experts, max_tokens, cap, key)
    return grouped, routing, [num_experts, T, k, max_tokens, cap]


def _combine(y: torch.Tensor, routing: list[torch.Tensor], sizes: list[int],
             topk_weights: torch.Tensor | None) -> torch.Tensor:
    return _ditron.moe_combine(y, topk_weights, routing, sizes, library.world_key())


def moe_dispatch(x: torch.Tensor, topk_ids: torch.Tensor, num_experts: int, *,
                 max_tokens: int | None = None,
                 max_recv_rows: int | None = None) -> MoEDispatch:
    """:func:`ditron.ops.moe_dispatch` whose ``x`` field is differentiable in ``x``."""
    grouped, routing, sizes = _dispatch(x, topk_ids, num_experts, max_tokens, max_recv_rows,
                                        "ditron.nn.moe.moe_dispatch", needs_grad(x=x))
    return dataclasses.replace(library.dispatch_of(grouped, routing, sizes), x=grouped,
                               world=world())


def grouped_gemm(x: torch.Tensor, w: torch.Tensor, offsets: torch.Tensor, *,
                 rows_per_group: float | None = None) -> torch.Tensor:
    """:func:`ditron.ops.grouped_gemm` (``rows_per_group`` as there; the input gradient's
    GEMM takes it too), differentiable in ``x`` and ``w`` (the gradient of ``x``'s rows
    outside the groups is zero)."""
    return _ditron.grouped_gemm(x, w, offsets, "auto", rows_per_group)


def moe_combine(y: torch.Tensor, dispatch: MoEDispatch,
                topk_weights: torch.Tensor | None = None) -> torch.Tensor:
    """:func:`ditron.ops.moe_combine`, differentiable in ``y`` and ``topk_weights``."""
    check_combine(y, dispatch, topk_weights)
    agree("ditron.nn.moe.moe_combine", needs_grad=needs_grad(y=y, topk_weights=topk_weights))
    return _combine(y, *library.routing_of(dispatch), topk_weights)


def _layer(x: torch.Tensor, topk_ids: torch.Tensor, topk_weights: torch.Tensor,
           w1: torch.Tensor, w2: torch.Tensor, activation: Callable, gated: bool,
           num_experts: int, max_tokens: int | None,
           max_recv_rows: int | None) -> torch.Tensor:
    """``ExpertParallelMLP``'s computation (plain tensors and lists throughout: one graph
    under ``torch.compile``)."""
    params = list(activation.parameters()) if isinstance(activation, torch.nn.Module) else []
    needs = needs_grad(x=x, topk_weights=topk_weights, expert_outputs=[x, w1, w2, *params])
    grouped, routing, sizes = _dispatch(x, topk_ids, num_experts, max_tokens, max_recv_rows,
                                        _LAYER, needs)
    size = dict(zip(library.SIZES, sizes, strict=True))
    rows = mean_rows_per_expert(library.world_size(library.world_key()), size["max_tokens"],
                                size["topk"], num_experts)
    h = grouped_gemm(grouped, w1, routing[0], rows_per_group=rows)
    if gated:
        gate, up = h.chunk(2, dim=1)
        h = activation(gate) * up
    else:
        h = activation(h)
    y = grouped_gemm(h, w2, routing[0], rows_per_group=rows)
    return _combine(y, routing, sizes, topk_weights)


#: the name of ``ExpertParallelMLP``'s agreement (its calls' first)
_LAYER = "ditron.nn.ExpertParallelMLP"


class ExpertParallelMLP(torch.nn.Module):
    """The experts of an MoE layer, ``E`` of them split over the ranks in equal blocks.

    Each expert is ``activation(x @ w1[e]) @ w2[e]`` (``w1 [E_local, hidden, ffn]``,
    ``w2 [E_local, ffn, hidden]``: this rank's experts ``rank * E_local ...``); with
    ``gated=True`` it is ``(activation(x @ w1[e][:, :ffn]) * (x @ w1[e][:, ffn:])) @ w2[e]``
    with ``w1 [E_local, hidden, 2 * ffn]`` (the gate's columns, then the up projection's:
    SwiGLU, the experts of Mixtral, Qwen-MoE and DeepSeek-MoE; one grouped GEMM for both).
    ``activation``: default ``silu`` when gated, ``gelu`` otherwise.
    :meth:`from_experts` takes this rank's experts from a model's ``nn.Linear`` modules.
    ``forward(x, topk_ids, topk_weights)``: ``x [T, hidden]`` this rank's tokens,
    ``topk_ids [T, k]`` their experts (``-1``: none), ``topk_weights [T, k]`` the router's
    weights; returns ``[T, hidden]``, ``sum_j topk_weights[t, j] * expert_j(x[t])``. The
    router (scores, top-k, load-balancing loss) stays the model's. ``max_tokens`` and
    ``max_recv_rows`` as in :func:`ditron.ops.moe_dispatch`. Under ``torch.autocast`` the
    tokens and weights are cast to its dtype (the output is in it), float64 ones excepted,
    as in torch. Built inside a Ditron world (``layer.world``), whose ranks hold the
    experts; it runs there whichever world is current (``ditron.use``), forward and
    backward, activation checkpointing's recomputation included.
    """

    def __init__(self, hidden: int, ffn: int, num_experts: int, *,
                 activation: Callable[[torch.Tensor], torch.Tensor] | None = None,
                 gated: bool = False, max_recv_rows: int | None = None,
                 device: torch.device | None = None,
                 dtype: torch.dtype | None = None) -> None:
        super().__init__()
        w = world()
        hidden = check_int(hidden, "ExpertParallelMLP: hidden", 1)
        ffn = check_int(ffn, "ExpertParallelMLP: ffn", 1)
        experts = as_int(num_experts)
        if experts is None or experts <= 0 or experts % w.world_size:
            raise ValueError(f"ExpertParallelMLP: num_experts must be a positive multiple of "
                             f"the world size {w.world_size}, got {num_experts!r}")
        num_experts = experts
        self.world = w
        self.hidden, self.ffn, self.num_experts = hidden, ffn, num_experts
        self.local_experts = num_experts // w.world_size
        if activation is None:
            activation = torch.nn.functional.silu if gated else torch.nn.functional.gelu
        self.activation, self.gated = activation, gated
        self.max_recv_rows = (None if max_recv_rows is None
                              else check_int(max_recv_rows, "ExpertParallelMLP: max_recv_rows"))
        kw = {"device": device or w.device, "dtype": dtype}
        self.w1 = torch.nn.Parameter(torch.empty(self.local_experts, hidden,
                                                 2 * ffn if gated else ffn, **kw))
        self.w2 = torch.nn.Parameter(torch.empty(self.local_experts, ffn, hidden, **kw))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Each expert's matrices like ``torch.nn.Linear``'s weight: uniform in
        ``+-1/sqrt(fan_in)``, each rank's experts their own draw
        (:func:`~ditron.nn.linear.shard_generator`; every rank resets its experts)."""
        gen = shard_generator(self.w1.device, self.world.rank)
        with torch.no_grad():
            self.w1.uniform_(-1 / math.sqrt(self.hidden), 1 / math.sqrt(self.hidden),
                             generator=gen)
            self.w2.uniform_(-1 / math.sqrt(self.ffn), 1 / math.sqrt(self.ffn), generator=gen)

    def forward(self, x: torch.Tensor, topk_ids: torch.Tensor, topk_weights: torch.Tensor,
                max_tokens: int | None = None) -> torch.Tensor:
        with in_world(self.world, "ExpertParallelMLP"):
            w1, w2, mode = self.w1, self.w2, contextlib.nullcontext()
            kind = x.device.type if isinstance(x, torch.Tensor) else None
            if kind in ("cpu", "cuda") and torch.is_autocast_enabled(kind):
                # as torch.nn.Linear under autocast: the GEMMs in its dtype (float64 stays
                # float64), the casts differentiable (fp32 weights get fp32 gradients)
                dtype = torch.get_autocast_dtype(kind)
                x, w1, w2 = (autocast_operand(t, kind, dtype) for t in (x, w1, w2))
                mode = torch.autocast(kind, enabled=False)
            _before_dispatch(lambda: self._check(x, topk_ids, topk_weights, w1.dtype), _LAYER)
            with mode:
                return _layer(x, topk_ids, topk_weights, w1, w2, self.activation, self.gated,
                              self.num_experts, max_tokens, self.max_recv_rows)

    def _check(self, x: torch.Tensor, topk_ids: torch.Tensor, topk_weights: torch.Tensor,
               dtype: torch.dtype) -> None:
        """The checks of ``forward``'s arguments that the dispatch does not make (before it,
        so that nothing runs: a wrong hidden size failed in the first grouped GEMM, wrong
        weights in the combine, after the experts ran)."""
        if not isinstance(x, torch.Tensor):  # read below (an AttributeError before)
            raise TypeError(f"ExpertParallelMLP: x must be a torch.Tensor [tokens, "
                            f"{self.hidden}], got {type(x).__name__}")
        if x.dim() == 2 and x.shape[1] != self.hidden:
            raise ValueError(f"ExpertParallelMLP: x must be [tokens, {self.hidden}], got "
                             f"{tuple(x.shape)}")
        if isinstance(topk_ids, torch.Tensor) and topk_ids.dim() == 2:
            check_topk_weights("ExpertParallelMLP", topk_weights, *topk_ids.shape, x.device)
        if x.dtype != dtype:
            raise ValueError(f"ExpertParallelMLP: input dtype {x.dtype} != weight dtype {dtype}")
        if dtype not in GEMM_DTYPES:  # it failed in the first grouped GEMM, after the dispatch
            raise ValueError(f"ExpertParallelMLP: the experts compute in {dtype}; the grouped "
                             f"GEMMs take {', '.join(str(t) for t in GEMM_DTYPES)} (build "
                             f"the layer in one of them, or call it under torch.autocast, "
                             f"which casts float32 weights, not float64 ones)")

    @classmethod
    def from_experts(cls, experts: Sequence[Sequence[torch.nn.Linear]],
                     **kwargs) -> ExpertParallelMLP:
        """This rank's block of ``experts``, all ``E`` of a model's experts (the same on
        every rank), each ``(up, down)`` or, gated, ``(gate, up, down)``: ``nn.Linear``
        modules without bias, ``up`` / ``gate`` ``hidden -> ffn`` and ``down`` ``ffn ->
        hidden`` (Mixtral's ``(w1, w3, w2)``). ``kwargs`` as for the constructor (``dtype``
        defaults to the modules')."""
        experts = [tuple(e) for e in experts]
        arity = {len(e) for e in experts}
        if not experts or len(arity) != 1 or arity - {2, 3}:
            raise ValueError(f"ExpertParallelMLP.from_experts: need a non-empty list of "
                             f"(up, down) or (gate, up, down) nn.Linear tuples, got lengths "
                             f"{sorted(arity)}")
        first = experts[0]
        hidden, ffn = first[0].in_features, first[0].out_features
        for i, e in enumerate(experts):
            for j, m in enumerate(e):
                want = (hidden, ffn) if j < len(e) - 1 else (ffn, hidden)
                if not isinstance(m, torch.nn.Linear) or m.bias is not None \
                        or (m.in_features, m.out_features) != want:
                    raise ValueError(f"ExpertParallelMLP.from_experts: expert {i} module "
                                     f"{j} must be an nn.Linear {want[0]} -> {want[1]} "
                                     f"without bias, got {m}")
        layer = cls(hidden, ffn, len(experts), gated=len(first) == 3,
                    dtype=kwargs.pop("dtype", first[0].weight.dtype), **kwargs)
        mine = experts[world().rank * layer.local_experts:][:layer.local_experts]
        with torch.no_grad():
            for e, modules in enumerate(mine):
                *ins, down = modules
                layer.w1[e].copy_(torch.cat([m.weight.t() for m in ins], dim=1))
                layer.w2[e].copy_(down.weight.t())
        return layer

    def extra_repr(self) -> str:
        act = self.activation  # a module is a child, shown by torch's repr itself
        act = "" if isinstance(act, torch.nn.Module) else \
            f", activation={getattr(act, '__name__', None) or repr(act)}"
        cap = "" if self.max_recv_rows is None else f", max_recv_rows={self.max_recv_rows}"
        return (f"hidden={self.hidden}, ffn={self.ffn}, num_experts={self.num_experts}, "
                f"local_experts={self.local_experts}, gated={self.gated}{act}{cap}, "
                f"world={list(self.world.global_ranks)}")
