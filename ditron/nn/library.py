"""Ditron's operators as torch custom ops: ``torch.ops.ditron.<name>``.

Registered with ``torch.library.custom_op`` when ``ditron.nn`` is imported, so that
``torch.compile`` keeps each call as one opaque node of its graph (a *fake* implementation
gives the output's shape and dtype without running anything) and autograd formulas
(``functional.py``) can call them. Each op is the ``ditron.ops`` function of the same name,
with the same semantics and checks, and returns new tensors (never a view of an input):

- ``ag_gemm(a, b, method) -> c``: ``all_gather(a, dim=0) @ b``, ``a: [m, K]``, ``c: [W*m, N]``;
- ``ag_gemm_gathered(a, b, method) -> (c, gathered_a)``: the same, also returning the
  gathered ``[W*m, K]`` input (what a backward pass reuses);
- ``gemm_rs(a, b, method) -> c``: ``reduce_scatter(a @ b, dim=0)``, ``c: [M/W, N]``;
- ``gemm_ar(a, b, method) -> c``: ``all_reduce(a @ b)``;
- ``all_gather(x) / reduce_scatter(x)``: along dim 0; ``all_reduce(x)``;
- expert parallelism (``ditron.ops.moe``): ``moe_dispatch(x, topk_ids, num_experts,
  max_tokens, max_recv_rows) -> (grouped_x, *routing)``; ``moe_send_copies(rows, routing,
  sizes)`` and ``moe_return_copies(y, routing, sizes)``, the data movement of the dispatch
  and of the combine (before its sum) for any rows; ``moe_combine(y, weights, routing,
  sizes)``, the combine with its weighted sum, and for its gradients (no autograd formulas)
  ``moe_send_tokens(rows, weights, routing, sizes)``, token rows weighted per copy as they
  move, and ``moe_copy_dots(y, g, routing, sizes)``; ``grouped_gemm(x, w, offsets)`` and
  ``grouped_gemm_wgrad(x, dy, offsets)``. ``routing`` is the list of the dispatch's device
  tensors and ``sizes`` its integers, in the orders of :data:`ROUTING` and :data:`SIZES`.
  These carry their autograd formulas (``register_autograd``, at the end of this module).

They are collectives: every rank must call them in the same order with matching shapes.
Each takes a last argument ``world``: ``""`` (the default) runs it in the current world;
:func:`world_key` names one of this process's worlds, so that a backward pass, which
autograd runs later, runs in the world of its forward pass, in eager and compiled code.
"""

from __future__ import annotations

import contextlib

import torch

from ..ops.moe import MoEDispatch
from ..runtime.world import use, world_over
from ..runtime.world import world as current_world


def world_key() -> str:
    """The current world as these ops' ``world`` argument: its global ranks."""
    return ",".join(str(r) for r in current_world().global_ranks)


def world_size(key: str) -> int:
    """The size of the world ``key`` names (``""``: the current one)."""
    return key.count(",") + 1 if key else current_world().world_size


def _in(key: str):
    """Run in the world ``key`` names (``""``: the current one)."""
    if not key:
        return contextlib.nullcontext()
    return use(world_over(tuple(int(r) for r in key.split(","))))


def _own(out: torch.Tensor, *inputs: torch.Tensor) -> torch.Tensor:
    """``out``, copied if it shares memory with an input (a custom op may not alias one)."""
    ptr = out.untyped_storage().data_ptr()
    if any(t.untyped_storage().data_ptr() == ptr for t in inputs):
        return out.clone()
    return out


def _ops():
    from .. import ops  # loaded on first use, as ``ditron.ops`` itself is

    return ops


def _inner(op: str, a: torch.Tensor, b: torch.Tensor) -> None:
    """What a fake call can check: 2-D operands with matching inner dimensions."""
    if a.dim() != 2 or b.dim() != 2 or a.shape[1] != b.shape[0]:
        raise ValueError(f"ditron::{op}: need a: [M, K] and b: [K, N], got a "
                         f"{tuple(a.shape)} and b {tuple(b.shape)}")


def _rows(op: str, rows: int, W: int) -> int:
    if rows % W:
        raise ValueError(f"ditron::{op}: {rows} rows do not split over {W} ranks")
    return rows // W


@torch.library.custom_op("ditron::ag_gemm", mutates_args=())
def ag_gemm(a: torch.Tensor, b: torch.Tensor, method: str = "auto",
            world: str = "") -> torch.Tensor:
    with _in(world):
        return _own(_ops().ag_gemm(a, b, method=method), a, b)


@ag_gemm.register_fake
def _(a, b, method="auto", world=""):
    _inner("ag_gemm", a, b)
    return a.new_empty((world_size(world) * a.shape[0], b.shape[1]))


@torch.library.custom_op("ditron::ag_gemm_gathered", mutates_args=())
def ag_gemm_gathered(a: torch.Tensor, b: torch.Tensor, method: str = "auto",
                     world: str = "") -> tuple[torch.Tensor, torch.Tensor]:
    with _in(world):
        c, gathered = _ops().ag_gemm(a, b, return_gathered=True, method=method)
    return _own(c, a, b), _own(gathered, a, b)


@ag_gemm_gathered.register_fake
def _(a, b, method="auto", world=""):
    _inner("ag_gemm_gathered", a, b)
    M = world_size(world) * a.shape[0]
    return a.new_empty((M, b.shape[1])), a.new_empty((M, a.shape[1]))


@torch.library.custom_op("ditron::gemm_rs", mutates_args=())
def gemm_rs(a: torch.Tensor, b: torch.Tensor, method: str = "auto",
            world: str = "") -> torch.Tensor:
    with _in(world):
        return _own(_ops().gemm_rs(a, b, method=method), a, b)


@gemm_rs.register_fake
def _(a, b, method="auto", world=""):
    _inner("gemm_rs", a, b)
    return a.new_empty((_rows("gemm_rs", a.shape[0], world_size(world)), b.shape[1]))


@torch.library.custom_op("ditron::gemm_ar", mutates_args=())
def gemm_ar(a: torch.Tensor, b: torch.Tensor, method: str = "auto",
            world: str = "") -> torch.Tensor:
    with _in(world):
        return _own(_ops().gemm_ar(a, b, method=method), a, b)


@gemm_ar.register_fake
def _(a, b, method="auto", world=""):
    _inner("gemm_ar", a, b)
    return a.new_empty((a.shape[0], b.shape[1]))


@torch.library.custom_op("ditron::all_gather", mutates_args=())
def all_gather(x: torch.Tensor, world: str = "") -> torch.Tensor:
    with _in(world):
        return _own(_ops().all_gather(x, 0), x)


@all_gather.register_fake
def _(x, world=""):
    return x.new_empty((world_size(world) * x.shape[0], *x.shape[1:]))


@torch.library.custom_op("ditron::reduce_scatter", mutates_args=())
def reduce_scatter(x: torch.Tensor, world: str = "") -> torch.Tensor:
    with _in(world):
        return _own(_ops().reduce_scatter(x, 0), x)


@reduce_scatter.register_fake
def _(x, world=""):
    return x.new_empty((_rows("reduce_scatter", x.shape[0], world_size(world)),
                        *x.shape[1:]))


@torch.library.custom_op("ditron::all_reduce", mutates_args=())
def all_reduce(x: torch.Tensor, world: str = "") -> torch.Tensor:
    with _in(world):
        return _own(_ops().all_reduce(x), x)


@all_reduce.register_fake
def _(x, world=""):
    return x.new_empty(x.shape)  # contiguous, as the op's result (not x's strides)


#: the :class:`~ditron.ops.moe.MoEDispatch` tensors a ``routing`` list holds, in order
ROUTING = ("expert_offsets", "order", "token", "send_splits", "perm", "inv_perm",
           "kept_splits")
#: its integers a ``sizes`` list holds, in order
SIZES = ("num_experts", "num_tokens", "topk", "max_tokens", "capacity")


def dispatch_of(like: torch.Tensor, routing: list[torch.Tensor],
                sizes: list[int]) -> MoEDispatch:
    """The :class:`~ditron.ops.moe.MoEDispatch` of ``routing`` and ``sizes`` (its ``x``: an
    empty tensor like ``like``)."""
    fields = dict(zip(ROUTING, routing, strict=True)) | dict(zip(SIZES, sizes, strict=True))
    return MoEDispatch(x=like[:0], **fields)


def routing_of(d: MoEDispatch) -> tuple[list[torch.Tensor], list[int]]:
    """``(routing, sizes)`` of a dispatch: what the ops below take."""
    return [getattr(d, f) for f in ROUTING], [getattr(d, f) for f in SIZES]


@torch.library.custom_op("ditron::moe_dispatch", mutates_args=())
def moe_dispatch(x: torch.Tensor, topk_ids: torch.Tensor, num_experts: int, max_tokens: int,
                 max_recv_rows: int, world: str = "") -> list[torch.Tensor]:
    with _in(world):
        d = _ops().moe_dispatch(x, topk_ids, num_experts, max_tokens=max_tokens,
                                max_recv_rows=max_recv_rows)
    return [_own(d.x, x), *routing_of(d)[0]]


@moe_dispatch.register_fake
def _(x, topk_ids, num_experts, max_tokens, max_recv_rows, world=""):
    W = world_size(world)
    index = {"dtype": torch.int64, "device": x.device}
    copies = topk_ids.shape[0] * topk_ids.shape[1]
    return [x.new_empty((max_recv_rows, x.shape[1])),
            torch.empty(num_experts // W + 1, **index), torch.empty(copies, **index),
            torch.empty(copies, **index), torch.empty(W, **index),
            torch.empty(max_recv_rows, **index), torch.empty(max_recv_rows, **index),
            torch.empty(W, **index)]


@torch.library.custom_op("ditron::moe_send_copies", mutates_args=())
def moe_send_copies(rows: torch.Tensor, routing: list[torch.Tensor], sizes: list[int],
                    world: str = "") -> torch.Tensor:
    from ..ops.moe import send_copies

    with _in(world):
        return _own(send_copies(rows, dispatch_of(rows, routing, sizes)), rows)


@moe_send_copies.register_fake
def _(rows, routing, sizes, world=""):
    return rows.new_empty((sizes[SIZES.index("capacity")], rows.shape[1]))


@torch.library.custom_op("ditron::moe_send_tokens", mutates_args=())
def moe_send_tokens(rows: torch.Tensor, weights: torch.Tensor | None,
                    routing: list[torch.Tensor], sizes: list[int],
                    world: str = "") -> torch.Tensor:
    from ..ops.moe import send_tokens

    with _in(world):
        return _own(send_tokens(rows, dispatch_of(rows, routing, sizes), weights), rows)


@moe_send_tokens.register_fake
def _(rows, weights, routing, sizes, world=""):
    return rows.new_empty((sizes[SIZES.index("capacity")], rows.shape[1]))


@torch.library.custom_op("ditron::moe_return_copies", mutates_args=())
def moe_return_copies(y: torch.Tensor, routing: list[torch.Tensor], sizes: list[int],
                      world: str = "") -> torch.Tensor:
    from ..ops.moe import return_copies

    with _in(world):
        return _own(return_copies(y, dispatch_of(y, routing, sizes)), y)


@moe_return_copies.register_fake
def _(y, routing, sizes, world=""):
    T, k = sizes[SIZES.index("num_tokens")], sizes[SIZES.index("topk")]
    return y.new_empty((T, k, y.shape[1]), dtype=torch.float32)


@torch.library.custom_op("ditron::moe_combine", mutates_args=())
def moe_combine(y: torch.Tensor, weights: torch.Tensor | None, routing: list[torch.Tensor],
                sizes: list[int], world: str = "") -> torch.Tensor:
    from ..ops.moe import combine_copies

    with _in(world):
        return _own(combine_copies(y, dispatch_of(y, routing, sizes), weights), y)


@moe_combine.register_fake
def _(y, weights, routing, sizes, world=""):
    return y.new_empty((sizes[SIZES.index("num_tokens")], y.shape[1]))


@torch.library.custom_op("ditron::moe_copy_dots", mutates_args=())
def moe_copy_dots(y: torch.Tensor, g: torch.Tensor, routing: list[torch.Tensor],
                  sizes: list[int], world: str = "") -> torch.Tensor:
    from ..ops.moe import copy_dots

    with _in(world):
        return copy_dots(y, dispatch_of(y, routing, sizes), g)


@moe_copy_dots.register_fake
def _(y, g, routing, sizes, world=""):
    T, k = sizes[SIZES.index("num_tokens")], sizes[SIZES.index("topk")]
    return y.new_empty((T, k), dtype=torch.float32)


@torch.library.custom_op("ditron::grouped_gemm", mutates_args=())
def grouped_gemm(x: torch.Tensor, w: torch.Tensor, offsets: torch.Tensor,
                 method: str = "auto", rows_per_group: float | None = None) -> torch.Tensor:
    return _own(_ops().grouped_gemm(x, w, offsets, method=method,
                                    rows_per_group=rows_per_group), x, w)


@grouped_gemm.register_fake
def _(x, w, offsets, method="auto", rows_per_group=None):
    if x.dim() != 2 or w.dim() != 3 or x.shape[1] != w.shape[1]:
        raise ValueError(f"ditron::grouped_gemm: need x: [R, K] and w: [G, K, N], got x "
                         f"{tuple(x.shape)} and w {tuple(w.shape)}")
    return x.new_empty((x.shape[0], w.shape[2]))


@torch.library.custom_op("ditron::grouped_gemm_wgrad", mutates_args=())
def grouped_gemm_wgrad(x: torch.Tensor, dy: torch.Tensor, offsets: torch.Tensor,
                       ) -> torch.Tensor:
    from ..kernels.grouped_gemm import grouped_gemm_wgrad as wgrad

    return wgrad(x, dy, offsets)


@grouped_gemm_wgrad.register_fake
def _(x, dy, offsets):
    return x.new_empty((offsets.shape[0] - 1, x.shape[1], dy.shape[1]))


# Autograd formulas of the MoE ops (``torch.library.register_autograd``): the dispatch's and
# ``moe_send_copies``' adjoint is ``moe_return_copies`` and the other way round (a dropped or
# unrouted copy, and a row past the groups, get zero gradient); backward runs in the world
# of the forward call.


def _dense(g: torch.Tensor) -> torch.Tensor:
    """``g`` contiguous, an empty one too: ``contiguous()`` keeps an empty tensor's
    strides, and the gradient of ``out.sum()`` over zero tokens has strides ``(0, 0)``,
    which the kernels refuse (a rank without tokens failed in the combine's backward)."""
    return g.contiguous() if g.numel() else g.new_empty(g.shape)


def _in_groups(rows: int, offsets: torch.Tensor) -> torch.Tensor:
    """``[rows, 1]`` bool: whether each row lies in a group (from ``offsets[0]``, before
    ``offsets[-1]``)."""
    r = torch.arange(rows, device=offsets.device)
    return ((r >= offsets[0]) & (r < offsets[-1]))[:, None]


def _save_routing(ctx, routing, sizes, world) -> None:
    ctx.save_for_backward(*routing)
    ctx.sizes, ctx.world = list(sizes), world


def _dispatch_setup(ctx, inputs, output):
    x, topk_ids, num_experts, max_tokens, max_recv_rows, world = inputs
    sizes = [num_experts, topk_ids.shape[0], topk_ids.shape[1], max_tokens, max_recv_rows]
    _save_routing(ctx, output[1:], sizes, world)
    ctx.dtype = x.dtype


def _dispatch_backward(ctx, grads):
    if grads[0] is None:
        return None, None, None, None, None, None
    gx = moe_combine(_dense(grads[0]), None, list(ctx.saved_tensors), ctx.sizes,
                     ctx.world)
    return gx.to(ctx.dtype), None, None, None, None, None


def _copies_setup(ctx, inputs, output):
    rows, routing, sizes, world = inputs
    _save_routing(ctx, routing, sizes, world)
    ctx.dtype = rows.dtype


def _send_copies_backward(ctx, g):
    copies = moe_return_copies(_dense(g), list(ctx.saved_tensors), ctx.sizes, ctx.world)
    return (copies.reshape(-1, g.shape[1]).to(ctx.dtype), [None] * len(ctx.saved_tensors),
            None, None)


def _return_copies_backward(ctx, g):
    routing = list(ctx.saved_tensors)
    rows = g.reshape(-1, g.shape[2]).to(ctx.dtype)
    gy = moe_send_copies(rows, routing, ctx.sizes, ctx.world)  # rows past the groups: zero
    return gy, [None] * len(routing), None, None


def _combine_setup(ctx, inputs, output):
    y, weights, routing, sizes, world = inputs
    ctx.save_for_backward(y, weights, *routing)
    ctx.sizes, ctx.world = list(sizes), world


def _combine_backward(ctx, g):
    """``dy(t, j) = w[t, j] * g[t]``, the products made as ``g``'s rows move to the copies'
    experts (``moe_send_tokens``); ``dw[t, j] = <g[t], y(t, j)>``, the copies' rows
    fetched again and read in place (``moe_copy_dots``; the forward pass keeps none)."""
    y, weights, *routing = ctx.saved_tensors
    gy = gw = None
    if ctx.needs_input_grad[0]:
        gy = moe_send_tokens(_dense(g.to(y.dtype)), weights, routing, ctx.sizes,
                             ctx.world)  # rows past the groups: zero
    if weights is not None and ctx.needs_input_grad[1]:
        gw = moe_copy_dots(y, _dense(g), routing, ctx.sizes, ctx.world).to(weights.dtype)
    return gy, gw, [None] * len(routing), None, None


def _gemm_setup(ctx, inputs, output):
    ctx.save_for_backward(*inputs[:3])
    ctx.method, ctx.rows_per_group = inputs[3:5]


def _gemm_backward(ctx, g):
    x, w, offsets = ctx.saved_tensors
    gx = gw = None
    if ctx.needs_input_grad[0]:
        gx = grouped_gemm(g, w.transpose(1, 2), offsets, ctx.method, ctx.rows_per_group)
        gx = torch.where(_in_groups(gx.shape[0], offsets), gx, 0)
    if ctx.needs_input_grad[1]:
        gw = grouped_gemm_wgrad(x, _dense(g), offsets)
    return gx, gw, None, None, None


moe_dispatch.register_autograd(_dispatch_backward, setup_context=_dispatch_setup)
moe_send_copies.register_autograd(_send_copies_backward, setup_context=_copies_setup)
moe_return_copies.register_autograd(_return_copies_backward, setup_context=_copies_setup)
moe_combine.register_autograd(_combine_backward, setup_context=_combine_setup)
grouped_gemm.register_autograd(_gemm_backward, setup_context=_gemm_setup)
