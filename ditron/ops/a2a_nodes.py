"""The device all-to-all's form for a world over several nodes.

Between nodes the rows travel through the network engine, which is two-sided: a receiver
posts its receive knowing how many rows come. So this form reads the split sizes on the
host, one synchronisation per call, and moves the rows with :func:`ditron.ops.all_to_all`
(the network engine to other nodes' ranks, the node's engines inside one); it cannot be
captured in a CUDA graph. Results equal the one-node kernels' (``a2a_device.py``): the
same gathers, scaling, capacity cut, placement and counts. ``exchange_counts`` needs no
host synchronisation: its rows are one per peer, an all-to-all of even splits.
"""

from __future__ import annotations

import math

import torch

from ..runtime.agreement import agree
from .collectives import all_to_all, all_to_all_counted
from .graphs import capturing


def _refuse_capture(op: str) -> None:
    if capturing():
        raise RuntimeError(f"{op}: across nodes the split sizes are read on the host, which "
                           f"a CUDA graph cannot replay; capture it on one node only")


def exchange_counts(counts: torch.Tensor) -> torch.Tensor:
    """Row ``q`` of ``counts [W, L]`` to rank ``q``; ``[W, L]`` int64 (checked arguments)."""
    return all_to_all(counts.to(torch.int64).contiguous())


def received_rows(op: str, x: torch.Tensor, splits: torch.Tensor, max_out_rows: int,
                  send_index: torch.Tensor | None, send_scale: torch.Tensor | None,
                  pair: tuple[torch.Tensor, torch.Tensor] | None = None
                  ) -> tuple[torch.Tensor, torch.Tensor, int]:
    """``(rows, out_splits, kept)`` for checked arguments: ``rows`` the rows received from
    ranks ``0..W-1`` in order (at least ``kept = min(sum(out_splits), max_out_rows)`` of
    them), ``out_splits [W]`` int64 on ``x``'s device: the rows each rank sent here. A
    sender's split past its send rows is cut to those left, as the kernels do. ``pair``:
    the caller's ``(x, extra)`` when ``x`` holds both as rows of bytes; the ranks agree
    on their row shapes and dtypes (as on one node), not only on the bytes."""
    _refuse_capture(op)
    rows_of, extra = (x, None) if pair is None else pair
    agree("ditron.ops.all_to_all_device", row_shape=tuple(rows_of.shape[1:]),
          dtype=rows_of.dtype, max_out_rows=int(max_out_rows),
          extra=None if extra is None else (tuple(extra.shape[1:]), extra.dtype))
    rows = x if send_index is None else x.index_select(0, send_index)
    if send_scale is not None:  # in fp32, rounded once
        rows = (rows.float() * send_scale.view(-1, *(1,) * (rows.dim() - 1))).to(x.dtype)
    sends, start = [], 0
    for s in splits.tolist():  # the host synchronisation
        sends.append(min(max(s, 0), max(rows.shape[0] - start, 0)))
        start += max(s, 0)
    got, came = all_to_all_counted(rows[:sum(sends)], sends)
    out_splits = torch.tensor(came, dtype=torch.int64, device=x.device)
    return got, out_splits, min(got.shape[0], max_out_rows)


def all_to_all_device(x: torch.Tensor, splits: torch.Tensor, max_out_rows: int,
                      send_index: torch.Tensor | None, recv_index: torch.Tensor | None,
                      send_scale: torch.Tensor | None, zero_missing: bool,
                      pair: tuple[torch.Tensor, torch.Tensor] | None = None
                      ) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`ditron.ops.all_to_all_device` across nodes (checked arguments; ``pair`` as
    for :func:`received_rows`)."""
    got, out_splits, kept = received_rows("all_to_all_device", x, splits, max_out_rows,
                                          send_index, send_scale, pair)
    new = torch.zeros if zero_missing else torch.empty
    out = new((max_out_rows, *x.shape[1:]), dtype=x.dtype, device=x.device)
    if recv_index is None:
        out[:kept] = got[:kept]
    elif kept:
        came = ((recv_index >= 0) & (recv_index < kept)).view(-1, *(1,) * (x.dim() - 1))
        picked = got.index_select(0, recv_index.clamp(0, kept - 1))
        out = torch.where(came, picked, out)
    return out, out_splits


def all_to_all_device_pair(x: torch.Tensor, extra: torch.Tensor, splits: torch.Tensor,
                           max_out_rows: int, send_index: torch.Tensor | None,
                           recv_index: torch.Tensor | None, zero_missing: bool
                           ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(out, out_splits, extra_out)`` of :func:`ditron.ops.all_to_all_device_pair` across
    nodes (checked arguments): each row of ``x`` and its ``extra`` row travel as one row of
    bytes, so the pair costs one exchange (one split read), not two."""
    xb = _row_bytes(x)
    packed = torch.cat([xb, _row_bytes(extra)], dim=1)
    out, out_splits = all_to_all_device(packed, splits, max_out_rows, send_index, recv_index,
                                        None, zero_missing, pair=(x, extra))
    cut = xb.shape[1]
    return (_from_bytes(out[:, :cut], x), out_splits, _from_bytes(out[:, cut:], extra))


def _row_bytes(t: torch.Tensor) -> torch.Tensor:
    """``t``'s rows (dim 0) as ``[rows, bytes]`` uint8."""
    width = t.element_size() * math.prod(t.shape[1:])
    return t.contiguous().view(-1).view(torch.uint8).view(t.shape[0], width)


def _from_bytes(b: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    """``[rows, bytes]`` uint8 back to rows of ``like``'s row shape and dtype. A column
    slice of a packed row counts as contiguous when it has at most one row, yet starts at
    a byte offset that ``like``'s dtype may not divide: such a slice is copied first."""
    if not b.is_contiguous() or b.storage_offset() % like.element_size():
        b = b.clone(memory_format=torch.contiguous_format)
    return b.view(-1).view(like.dtype).view(b.shape[0], *like.shape[1:])


def inbox_rows(x: torch.Tensor, splits: torch.Tensor, max_out_rows: int,
               send_index: torch.Tensor | None
               ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The fields ``(rows, splits, first)`` of :func:`ditron.ops.all_to_all_inbox`'s
    ``Inbox`` across nodes (checked arguments): ``rows [max_out_rows, *row]`` holds the
    received rows from ``first[0] = 0`` on, this rank's own among them, in a tensor of
    their own (nothing to release when the inbox closes)."""
    got, out_splits, kept = received_rows("all_to_all_inbox", x, splits, max_out_rows,
                                          send_index, None)
    rows = torch.empty((max(max_out_rows, 1), *x.shape[1:]), dtype=x.dtype, device=x.device)
    rows[:kept] = got[:kept]
    return rows, out_splits, torch.zeros(1, dtype=torch.int64, device=x.device)
