"""Expert parallelism: token dispatch to the experts' ranks, grouped GEMM, combine.

``E`` experts are laid out in equal blocks: rank ``r`` holds experts ``r * E_local ..
(r + 1) * E_local - 1`` with ``E_local = E / W``. A layer is

    d = moe_dispatch(x, topk_ids, E)                 # rows for my experts, grouped by expert
    r = d.mean_rows_per_expert                       # picks the GEMMs' tiles
    h = grouped_gemm(d.x, w1, d.expert_offsets, rows_per_group=r)   # w1: [E_local, H, F]
    y = grouped_gemm(act(h), w2, d.expert_offsets, rows_per_group=r)  # w2: [E_local, F, H]
    out = moe_combine(y, d, topk_weights)            # [T, H]: sum_k weight * expert(x)

Everything after the arguments' checks runs on the device, with no host synchronisation:
routing counts, offsets and permutations are device tensors, the rows move with
:func:`ditron.ops.all_to_all_device`, so a layer can be captured in a CUDA graph and
replayed with new routing. Buffers have fixed capacities: ``max_recv_rows`` rows arrive at
most (default ``W * max_tokens * k``, every copy of every rank, so nothing is dropped).

Order and drops, per rank: the copies ``(t, j)`` of tokens (``t < T``, ``j < k``) are sorted
by expert id (stable: token order within an expert) and sent; a rank receives the copies
of rank 0, then 1, ..., and groups them by local expert (stable: source rank, then token
order). Copies past ``max_recv_rows`` (those of the highest source ranks) are dropped and
contribute zero to ``moe_combine``, as are copies whose expert id is outside ``[0, E)``
(``-1`` marks an unrouted copy, as in DeepEP; ids ``>= E`` raise ``ValueError`` on every
rank in debug mode, ``DITRON_WAIT_TIMEOUT > 0``, where the ids are read on the host).

Across nodes the all-to-alls read their split sizes on the host (one synchronisation each,
``a2a_nodes.py``), so such a layer cannot be captured in a CUDA graph.
"""

from __future__ import annotations

import dataclasses
import functools

import torch

from ..kernels.gather_sum import gather_dot, weighted_gather_sum
from ..kernels.grouped_gemm import DTYPES, check_grouped
from ..kernels.grouped_gemm import grouped_gemm as _grouped_gemm
from ..kernels.routing import group_received, returned_index, returned_sources, sort_copies
from ..runtime.agreement import agree, checking_data, raise_together, refused_together
from ..runtime.integers import as_int, check_int
from ..runtime.tensor_spans import spans_overlap
from ..runtime.world import World, current, is_initialized
from .modes import check_writable, public_op


@dataclasses.dataclass(frozen=True)
class MoEDispatch:
    """What :func:`moe_dispatch` returns and :func:`moe_combine` needs (device tensors).

    ``x [max_recv_rows, H]``: the received token rows grouped by local expert; rows
    ``expert_offsets[e] .. expert_offsets[e + 1] - 1`` go to local expert ``e``, rows from
    ``expert_offsets[-1]`` on are undefined. ``x_scales``: the ``x_scales`` rows given to
    :func:`moe_dispatch`, moved and grouped as ``x`` (``[max_recv_rows, *S]``), else
    ``None``. The other fields are the routing ``moe_combine`` reverses.
    """

    x: torch.Tensor
    expert_offsets: torch.Tensor
    num_experts: int
    num_tokens: int
    topk: int
    max_tokens: int
    #: ``max_recv_rows``: the rows of ``x``
    capacity: int
    #: send position ``i`` holds copy ``order[i]`` (flat ``t * k + j``) [T * k]
    order: torch.Tensor
    #: ... of token ``token[i] = order[i] // k`` [T * k]
    token: torch.Tensor
    #: copies sent to each rank [W]; the received rows each rank kept of them are in
    #: the combine's returned splits
    send_splits: torch.Tensor
    #: grouped row ``i`` is received row ``perm[i]`` [max_recv_rows]
    perm: torch.Tensor
    #: received row ``r`` is grouped row ``inv_perm[r]`` [max_recv_rows]
    inv_perm: torch.Tensor
    #: received rows kept from each rank [W] (rows past the capacity dropped)
    kept_splits: torch.Tensor
    x_scales: torch.Tensor | None = None
    #: the world the dispatch ran in (its routing holds for those ranks only; ``None``:
    #: not recorded), which :func:`moe_combine` must run in too
    world: World | None = None

    @property
    def tokens_per_expert(self) -> torch.Tensor:
        """Rows each local expert received ``[E_local]`` (int64; a new tensor, one launch)."""
        return self.expert_offsets.diff()

    @property
    def mean_rows_per_expert(self) -> float:
        """Rows a local expert receives on average when every rank routes ``max_tokens``
        tokens evenly: ``W * max_tokens * k / E`` (what :func:`grouped_gemm`'s
        ``rows_per_group`` wants; ``x`` has ``W`` times as many rows per expert)."""
        return mean_rows_per_expert(self.send_splits.shape[0], self.max_tokens, self.topk,
                                    self.num_experts)


def mean_rows_per_expert(world_size: int, max_tokens: int, topk: int,
                         num_experts: int) -> float:
    """``W * max_tokens * k / E``: :attr:`MoEDispatch.mean_rows_per_expert`."""
    return world_size * max_tokens * topk / num_experts


def _check(x: torch.Tensor, topk_ids: torch.Tensor, num_experts: int, w: int,
           x_scales: torch.Tensor | None, device: torch.device) -> int:
    """Refuse bad dispatch arguments (``device``: the rank's); return ``num_experts`` as an
    int."""
    if not isinstance(x, torch.Tensor) or not isinstance(topk_ids, torch.Tensor):
        raise TypeError(f"ditron.ops.moe_dispatch: x and topk_ids must be torch.Tensors, got "
                        f"{type(x).__name__} and {type(topk_ids).__name__}")
    if x.dim() != 2:
        raise ValueError(f"ditron.ops.moe_dispatch: x must be [tokens, hidden], got "
                         f"{tuple(x.shape)}")
    if not x.dtype.is_floating_point:
        raise ValueError(f"ditron.ops.moe_dispatch: x must be a floating tensor, got {x.dtype}")
    if topk_ids.dim() != 2 or topk_ids.shape[0] != x.shape[0]:
        raise ValueError(f"ditron.ops.moe_dispatch: topk_ids must be [tokens, k] = "
                         f"[{x.shape[0]}, k], got {tuple(topk_ids.shape)}")
    if topk_ids.dtype.is_floating_point or topk_ids.dtype.is_complex \
            or topk_ids.dtype == torch.bool:
        raise ValueError(f"ditron.ops.moe_dispatch: topk_ids must be integers, got "
                         f"{topk_ids.dtype}")
    if x.device != device or topk_ids.device != device:
        raise ValueError(f"ditron.ops.moe_dispatch: x and topk_ids must be on {device}, this "
                         f"rank's device; got {x.device} and {topk_ids.device}")
    experts = as_int(num_experts)
    if experts is None or experts <= 0 or experts % w:
        raise ValueError(f"ditron.ops.moe_dispatch: num_experts must be a positive multiple of "
                         f"the world size {w}, got {num_experts!r}")
    if x_scales is not None and (
            not isinstance(x_scales, torch.Tensor) or x_scales.dim() < 1
            or x_scales.shape[0] != x.shape[0] or not x_scales.dtype.is_floating_point
            or x_scales.device != x.device):
        raise ValueError(f"ditron.ops.moe_dispatch: x_scales must be a floating [{x.shape[0]}, "
                         f"...] tensor (a row per token) on {x.device}, got {_described(x_scales)}")
    return experts


def _check_ids(topk_ids: torch.Tensor, num_experts: int) -> None:
    """Debug mode's check that no expert id is ``>= num_experts`` (it reads the ids on the
    host). Collective: a rank with a bad id raises, and so does every other rank (naming
    the rank), rather than waiting for it in the exchange."""
    top = int(topk_ids.max()) if topk_ids.numel() else -1
    raise_together("ditron.ops.moe_dispatch: expert ids out of range",
                   f"expert id {top} >= num_experts {num_experts}" if top >= num_experts
                   else None)


def _described(t: object) -> str:
    if isinstance(t, torch.Tensor):
        return f"{tuple(t.shape)} {t.dtype} on {t.device}"
    return type(t).__name__


@public_op
def moe_dispatch(x: torch.Tensor, topk_ids: torch.Tensor, num_experts: int, *,
                 max_tokens: int | None = None, max_recv_rows: int | None = None,
                 x_scales: torch.Tensor | None = None) -> MoEDispatch:
    """Send each token row ``x[t]`` to the ranks of its ``k`` experts ``topk_ids[t]``.

    ``x [T, H]`` (floating), ``topk_ids [T, k]`` integer expert ids in ``[0, E)`` (``-1``:
    not routed), ``num_experts = E`` a multiple of the world size. ``max_tokens``: the
    largest ``T`` of any rank (default this rank's ``T``; pass it when ranks differ), and
    ``max_recv_rows``: rows a rank can receive (default ``W * max_tokens * k``); both equal
    on every rank (checked). ``x_scales [T, *S]`` (floating, optional): per-token rows that
    travel with ``x``, e.g. the dequantisation scales of fp8 token rows (DeepSeek-V3's
    ``[T, H / 128]``); they come back grouped as ``x`` in :attr:`MoEDispatch.x_scales`.
    Collective. Returns a :class:`MoEDispatch`.
    """
    rt = current()
    w = rt.world.world_size
    # in debug mode the peers of a repeated call gather in _check_ids: a rank refusing
    # its arguments tells them there
    with refused_together("ditron.ops.moe_dispatch", checks_data=True):
        num_experts = _check(x, topk_ids, num_experts, w, x_scales, rt.world.device)
        T, k = topk_ids.shape
        tokens = T if max_tokens is None else as_int(max_tokens)
        if tokens is None or tokens < T:
            raise ValueError(f"ditron.ops.moe_dispatch: max_tokens must be an int >= this "
                             f"rank's {T} tokens, got {max_tokens!r}")
        max_tokens = tokens
        cap = check_int(w * max_tokens * k if max_recv_rows is None else max_recv_rows,
                        "ditron.ops.moe_dispatch: max_recv_rows")
    agree("ditron.ops.moe_dispatch", num_experts=num_experts, k=k, hidden=x.shape[1],
          dtype=x.dtype, max_tokens=max_tokens, max_recv_rows=cap,
          scales=None if x_scales is None else (tuple(x_scales.shape[1:]), x_scales.dtype))
    if checking_data():
        _check_ids(topk_ids, num_experts)
    local = num_experts // w

    copies = sort_copies(topk_ids, num_experts, w)
    from .a2a_device import exchange_counts

    recv_counts = exchange_counts(copies.counts.view(w, local))  # [source, local expert]
    perm, inv_perm, offsets, kept_splits = group_received(recv_counts, cap)
    if x_scales is None:
        grouped, scales = _send(x, copies.token, copies.send_splits, cap, perm), None
    else:  # the scales ride along the rows' routes, in the same launches
        from .a2a_device import all_to_all_device_pair

        grouped, scales, _ = all_to_all_device_pair(x, x_scales, copies.send_splits, cap,
                                                    send_index=copies.token, recv_index=perm)
    return MoEDispatch(grouped, offsets, num_experts, T, k, max_tokens, cap,
                       copies.order, copies.token, copies.send_splits, perm, inv_perm,
                       kept_splits, scales, rt.world)


def _send(src: torch.Tensor, index: torch.Tensor, send_splits: torch.Tensor, capacity: int,
          perm: torch.Tensor, scale: torch.Tensor | None = None,
          zero: bool = False) -> torch.Tensor:
    """Rows ``src[index]`` (in send order, ``send_splits`` per rank; times ``scale``, one
    value per send row) to their experts' ranks, grouped by ``perm`` into ``capacity``
    rows (those past the groups zero with ``zero``, else undefined): the gather, the
    scaling and the grouping happen inside the all-to-all's kernels."""
    from .a2a_device import all_to_all_device

    return all_to_all_device(src, send_splits, capacity, send_index=index, recv_index=perm,
                             send_scale=scale, zero_missing=zero)[0]


@public_op
def send_copies(rows: torch.Tensor, dispatch: MoEDispatch) -> torch.Tensor:
    """The data movement of :func:`moe_dispatch` for any per-copy rows: ``rows [T * k, N]``
    (row ``t * k + j`` for copy ``(t, j)``) arrive at their experts' ranks, grouped as
    ``dispatch.x`` (``[max_recv_rows, N]``; rows past ``expert_offsets[-1]`` zero).
    Collective; no checks (``ditron.nn`` uses it for gradients)."""
    d = dispatch
    return _send(rows, d.order, d.send_splits, d.capacity, d.perm, zero=True)


@public_op
def send_tokens(rows: torch.Tensor, dispatch: MoEDispatch,
                weights: torch.Tensor | None = None) -> torch.Tensor:
    """:func:`moe_dispatch`'s movement for new token rows: ``rows [T, N]`` (fp16, bf16 or
    fp32), row ``t`` to each copy ``(t, j)``'s expert, times ``weights[t, j]`` (``[T, k]``;
    in fp32, rounded once), grouped as ``dispatch.x`` (rows past ``expert_offsets[-1]``
    zero). With the combine's weights and its output's gradient this is the gradient of
    its ``y``, no ``[T, k, N]`` copies made. Collective; no checks."""
    d = dispatch
    scale = None if weights is None else weights.reshape(-1)[d.order]
    return _send(rows, d.token, d.send_splits, d.capacity, d.perm, scale, zero=True)


def _returned(y: torch.Tensor, d: MoEDispatch) -> tuple[torch.Tensor, torch.Tensor]:
    """Send ``y``'s rows back to their tokens' ranks: ``(back, idx)`` with ``back`` the rows
    that came back and ``idx [T, k]`` the row of ``back`` holding copy ``(t, j)`` (``-1``:
    dropped or unrouted)."""
    from .a2a_device import all_to_all_device

    T, k = d.num_tokens, d.topk
    back, back_splits = all_to_all_device(y, d.kept_splits, d.max_tokens * k,
                                          send_index=d.inv_perm)
    idx = returned_index(d.order, d.send_splits, back_splits)
    return back, idx.view(T, k)


@public_op
def return_copies(y: torch.Tensor, dispatch: MoEDispatch) -> torch.Tensor:
    """The data movement of :func:`moe_combine`, before the sum: ``y [max_recv_rows, N]``
    in ``dispatch.x``'s order back at the tokens' ranks as fp32 ``[T, k, N]`` (copy
    ``(t, j)`` at ``[t, j]``; zero for a dropped or unrouted copy). Collective; no checks."""
    back, idx = _returned(y, dispatch)
    if back.shape[0] == 0:
        return back.new_zeros((*idx.shape, y.shape[1]), dtype=torch.float32)
    rows = back.index_select(0, idx.reshape(-1).clamp(min=0)).view(*idx.shape, y.shape[1])
    return torch.where((idx >= 0)[:, :, None], rows.float(), 0.0)


@public_op
def moe_combine(y: torch.Tensor, dispatch: MoEDispatch,
                topk_weights: torch.Tensor | None = None) -> torch.Tensor:
    """Return each expert output row ``y`` to its token's rank and sum a token's copies.

    ``y [max_recv_rows, N]``: rows in ``dispatch.x``'s order (what the local experts made
    of them; rows past ``expert_offsets[-1]`` are ignored). ``topk_weights [T, k]``
    (floating; ``None``: weight 1). Returns ``out [T, N]`` in ``y``'s dtype, ``out[t] =
    sum_j topk_weights[t, j] * y_row(t, j)`` summed in fp32, a dropped or unrouted copy
    counting zero. Collective.
    """
    check_combine(y, dispatch, topk_weights)
    return combine_copies(y, dispatch, topk_weights)


def combine_copies(y: torch.Tensor, dispatch: MoEDispatch,
                   topk_weights: torch.Tensor | None = None) -> torch.Tensor:
    """:func:`moe_combine` without its checks (``ditron.nn`` checks first). Collective."""
    return _read_returned(y, dispatch, functools.partial(weighted_gather_sum,
                                                          weights=topk_weights))


def copy_dots(y: torch.Tensor, dispatch: MoEDispatch, g: torch.Tensor) -> torch.Tensor:
    """``out[t, j] = <g[t], y_row(t, j)>`` in fp32 ``[T, k]`` (zero for a dropped or
    unrouted copy), ``g [T, N]``: the gradient of :func:`moe_combine`'s weights when ``g``
    is its output's, with the rows read where they lie. Collective; no checks."""
    return _read_returned(y, dispatch, functools.partial(gather_dot, g=g.contiguous()))


def _read_returned(y: torch.Tensor, d: MoEDispatch, read) -> torch.Tensor:
    """``read(rows, idx, src2=y, idx2=own)`` with ``idx [T, k]`` / ``own [T, k]`` each copy's
    returned row in ``rows`` (the all-to-all's inbox: a peer's) or in ``y`` (this rank's
    own), ``-1`` elsewhere: the consumer reads each row where it lies, in one pass."""
    from .a2a_device import all_to_all_inbox

    y = y.contiguous()
    shape = (d.num_tokens, d.topk)
    with all_to_all_inbox(y, d.kept_splits, d.max_tokens * d.topk,
                          send_index=d.inv_perm) as inbox:
        idx, own = returned_sources(d.order, d.send_splits, inbox.splits, inbox.first,
                                    d.kept_splits, d.inv_perm, current().world.rank)
        return read(inbox.rows, idx.view(shape), src2=y, idx2=own.view(shape))


def check_topk_weights(what: str, topk_weights: object, tokens: int, k: int,
                       device: torch.device) -> None:
    """``ValueError`` unless ``topk_weights`` is a floating ``[tokens, k]`` tensor on
    ``device``."""
    if not (isinstance(topk_weights, torch.Tensor) and topk_weights.shape == (tokens, k)
            and topk_weights.dtype.is_floating_point and topk_weights.device == device):
        raise ValueError(f"{what}: topk_weights must be floating [{tokens}, {k}] on {device}, "
                         f"got {_described(topk_weights)}")


def check_combine(y: torch.Tensor, dispatch: MoEDispatch,
                  topk_weights: torch.Tensor | None) -> None:
    """The checks of :func:`moe_combine` (``TypeError`` / ``ValueError``), and the ranks'
    agreement on ``y``'s shape and dtype."""
    d = dispatch
    # in debug mode the peers of a repeated call gather in the all-to-all's send_index check
    with refused_together("ditron.ops.moe_combine", checks_data=True):
        if not isinstance(d, MoEDispatch):
            raise TypeError(f"ditron.ops.moe_combine: dispatch must be what moe_dispatch "
                            f"returned, got {type(d).__name__}")
        here = current().world
        if d.world is not None and d.world.global_ranks != here.global_ranks:
            # the routing of another world: rows went to other ranks (wrong sums, silently,
            # in a world of the same size)
            raise ValueError(f"ditron.ops.moe_combine: the dispatch ran in the world over "
                             f"global ranks {list(d.world.global_ranks)}, but the world over "
                             f"{list(here.global_ranks)} is current; combine in the "
                             f"dispatch's world (ditron.use(dispatch.world))")
        T, k = d.num_tokens, d.topk
        if not isinstance(y, torch.Tensor):
            raise TypeError(f"ditron.ops.moe_combine: y must be a torch.Tensor [{d.capacity}, "
                            f"N], got {type(y).__name__}")
        if y.dim() != 2 or y.shape[0] != d.capacity or not y.dtype.is_floating_point:
            raise ValueError(f"ditron.ops.moe_combine: y must be floating [{d.capacity}, N] "
                             f"(dispatch.x's rows), got {tuple(y.shape)} {y.dtype}")
        if y.device != d.x.device:
            raise ValueError(f"ditron.ops.moe_combine: y is on {y.device}, the dispatch on "
                             f"{d.x.device}")
        if topk_weights is not None:
            check_topk_weights("ditron.ops.moe_combine", topk_weights, T, k, y.device)
    agree("ditron.ops.moe_combine", rows=y.shape[0], n=y.shape[1], dtype=y.dtype,
          max_tokens=d.max_tokens, k=k)


METHODS = ("auto", "triton", "torch")
#: the dtypes :func:`grouped_gemm` computes in (``x`` and ``w`` share one)
GEMM_DTYPES = DTYPES


def _check_grouped_out(x: torch.Tensor, w: torch.Tensor, out: torch.Tensor) -> None:
    """``ValueError`` unless :func:`grouped_gemm` can write ``out``: ``[R, N]`` in ``x``'s
    dtype and device, its elements distinct and apart from ``x``'s and ``w``'s (the kernel
    writes tiles while other tiles still read the operands)."""
    R, N = x.shape[0], w.shape[2]
    if not isinstance(out, torch.Tensor) or out.shape != (R, N) or out.dtype != x.dtype \
            or out.device != x.device:
        raise ValueError(f"ditron.ops.grouped_gemm: out must be [{R}, {N}] {x.dtype} on "
                         f"{x.device}, got {_described(out)}")
    check_writable("grouped_gemm", out)
    for name, t in (("x", x), ("w", w)):
        if spans_overlap(out, t):
            raise ValueError(f"ditron.ops.grouped_gemm: out overlaps {name} in memory; pass "
                             f"an out of its own")


@public_op
def grouped_gemm(x: torch.Tensor, w: torch.Tensor, offsets: torch.Tensor, *,
                 out: torch.Tensor | None = None, method: str = "auto",
                 rows_per_group: float | None = None) -> torch.Tensor:
    """``out[o[g]:o[g+1]] = x[o[g]:o[g+1]] @ w[g]`` for ``x [R, K]``, ``w [G, K, N]`` (any
    strides), ``offsets = o [G + 1]`` on the device, ``0 = o[0] <= ... <= o[G] <= R``
    (``MoEDispatch.expert_offsets``); a local op. Rows from ``o[G]`` on are undefined
    (``method="triton"`` leaves them, and rows before a nonzero ``o[0]``, unwritten).
    ``out`` (optional): ``[R, N]`` in ``x``'s dtype, its elements distinct and apart from
    ``x``'s and ``w``'s (``ValueError`` otherwise), filled and returned.

    ``method``: ``"triton"``, Ditron's kernel (``ditron.kernels.grouped_gemm``, fp16, bf16
    or fp32, :data:`GEMM_DTYPES`; any strides, every backend); ``"torch"``,
    ``torch._grouped_mm`` (bf16, CUDA capability >= 9, aligned operands); ``"auto"``
    (default), Ditron's kernel (on an H200 it ran REFERENCES.md's MoE GEMMs in 0.92-1.04x
    torch's time, and a 64-expert layer with it in 0.96x / 0.89x / 1.00x the time with
    torch's at 16 / 128 / 1024 rows per expert: ``docs/perf.md``, session 44). Neither
    reads the offsets on the host: both can be
    captured in a CUDA graph. ``rows_per_group``: the expected average rows per group,
    which picks Ditron's tiles (default ``R / G``; after a dispatch pass
    ``MoEDispatch.mean_rows_per_expert``: its ``x`` has ``W`` times as many rows as
    arrive on average).
    """
    check_grouped("ditron.ops.grouped_gemm", x, w, offsets)
    if is_initialized() and x.device != current().world.device:
        raise ValueError(f"ditron.ops.grouped_gemm: x is on {x.device}, this rank computes "
                         f"on {current().world.device}")
    if out is not None:
        _check_grouped_out(x, w, out)
    if rows_per_group is not None and (isinstance(rows_per_group, bool)
                                       or not isinstance(rows_per_group, (int, float))
                                       or not rows_per_group >= 0):
        raise ValueError(f"ditron.ops.grouped_gemm: rows_per_group must be a number >= 0, "
                         f"got {rows_per_group!r}")
    if method not in METHODS:
        raise ValueError(f"ditron.ops.grouped_gemm: method must be one of {METHODS}, got "
                         f"{method!r}")
    if method == "torch" and (x.device.type != "cuda" or x.dtype != torch.bfloat16
                              or not hasattr(torch, "_grouped_mm")):
        raise ValueError(f"ditron.ops.grouped_gemm: method='torch' needs bf16 CUDA tensors "
                         f"and torch._grouped_mm, got {x.dtype} on {x.device}")
    if method == "torch":
        result = torch._grouped_mm(x, w, offs=offsets[1:].to(torch.int32))
        return result if out is None else out.copy_(result)
    return _grouped_gemm(x, w, offsets, out=out, rows_per_group=rows_per_group)
