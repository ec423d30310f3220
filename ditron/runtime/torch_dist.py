"""torch.distributed's single-tensor all-gather and reduce-scatter, under the name the
installed torch prefers.

torch 2.13 renamed ``all_gather_into_tensor`` / ``reduce_scatter_tensor`` to
``all_gather_single`` / ``reduce_scatter_single`` and deprecates the old names with a
``FutureWarning``; older torch (the GPU machines' 2.11) has only the old names. Ditron's
fallbacks and its benchmarks' baselines call these two instead of either name.
"""

from __future__ import annotations

import torch
import torch.distributed as dist

_ALL_GATHER = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
_REDUCE_SCATTER = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor


def all_gather_single(out: torch.Tensor, x: torch.Tensor, group=None, async_op: bool = False):
    """``out`` (``[W * n, ...]``) = every rank's ``x`` (``[n, ...]``) in rank order."""
    return _ALL_GATHER(out, x, group=group, async_op=async_op)


def reduce_scatter_single(out: torch.Tensor, x: torch.Tensor, op=dist.ReduceOp.SUM,
                          group=None, async_op: bool = False):
    """``out`` (``[n, ...]``) = this rank's ``1/W`` of ``x`` (``[W * n, ...]``) reduced
    over ranks with ``op``."""
    return _REDUCE_SCATTER(out, x, op=op, group=group, async_op=async_op)
