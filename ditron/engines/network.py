"""Network engine: transfers between ranks whose heaps are not mapped (other nodes).

Two-sided: **both** ends issue the same :class:`~ditron.engines.base.Transfer`. The sender
(``src_rank``) posts a send of ``src``; the receiver (``dst_rank``) posts a receive into
``dst`` (the other side's tensor is ignored by each end, so pass any tensor of the same
shape). :meth:`drain` completes the posted operations and then raises, on the receiver, the
transfer's signal in its local pad (a reducing transfer first adds what it received into
``dst`` with torch's ``add_``: the dtypes of ``base.ADDED``, refused before anything is
posted otherwise). Ops go through ``torch.distributed``: NCCL when the world's device
group is NCCL (a tensor in host memory is staged through the rank's GPU), otherwise its
gloo host group (CUDA tensors are staged through host memory then): the group follows
from the world alone, since each end sees only its own side's tensor. Peers are named by
their world rank in that group. This is the
engine that carries a plan past one node; it also works between ranks of one node, which is
how it is tested on a single machine.
"""

from __future__ import annotations

import torch
import torch.distributed as dist

from ..runtime.world import current
from .base import Engine, Transfer, check_added, check_transfer, named, register_engine


@register_engine
class NetworkEngine(Engine):
    """Point-to-point sends and receives over torch.distributed."""

    name = "network"
    can_reduce = True

    def __init__(self) -> None:
        self._works: list = []
        self._landing: list[tuple[torch.Tensor, torch.Tensor, bool]] = []
        self._signals: list = []

    def _group(self, tensor: torch.Tensor) -> tuple[object, torch.device | None]:
        """The group a side moves through and the device it is staged on (``None``: moved
        as it is). Both ends must pick the same group whatever their tensors' devices (a
        send over NCCL and its receive over gloo never meet)."""
        rt = current()
        groups = rt.groups
        if groups.device_backend == "nccl":
            return groups.device, None if tensor.is_cuda else rt.world.device
        return groups.host, torch.device("cpu") if tensor.is_cuda else None

    def issue(self, transfers: list[Transfer], since: object | None = None) -> None:
        rank = current().world.rank
        for i, t in enumerate(transfers):  # all of them before posting any
            try:
                if t.src_rank == t.dst_rank:
                    raise ValueError("network engine: a transfer must cross ranks")
                check_transfer(t, rank, "network engine", mapped=False)
                if t.reduce:
                    check_added("network engine", t.src.dtype)
            except ValueError as exc:
                raise named(exc, transfers, i) from None
        ops = []
        for t in transfers:
            if rank == t.src_rank and t.src.numel():
                group, staged = self._group(t.src)
                buf = t.src.contiguous()
                buf = buf.to(staged) if staged is not None else buf
                ops.append(dist.P2POp(dist.isend, buf, group=group, group_peer=t.dst_rank))
            elif rank == t.dst_rank:
                if t.dst.numel():
                    group, staged = self._group(t.dst)
                    direct = t.dst.is_contiguous() and staged is None and not t.reduce
                    buf = t.dst if direct else torch.empty(
                        t.dst.shape, dtype=t.dst.dtype,
                        device=t.dst.device if staged is None else staged)
                    ops.append(dist.P2POp(dist.irecv, buf, group=group, group_peer=t.src_rank))
                    if not direct:
                        self._landing.append((buf, t.dst, t.reduce))
                if t.signal is not None:
                    self._signals.append(t.signal)
        if ops:
            self._works.extend(dist.batch_isend_irecv(ops))

    def drain(self) -> None:
        # all taken first: a wait that raises must not leave its batch's landings and
        # signals to a later drain (they would write stale buffers, raise stale signals)
        works, landing, signals = self._works, self._landing, self._signals
        self._works, self._landing, self._signals = [], [], []
        for w in works:
            w.wait()
        # as the copy engine's worker: a dst made under inference_mode (or a view of a leaf
        # that requires grad) is written like the direct receives write it, not refused here,
        # after the data came and before the signals
        with torch.inference_mode():
            for buf, dst, reduce in landing:
                if reduce:
                    dst.add_(buf.to(dst.device))
                else:
                    dst.copy_(buf)
        for s in signals:
            s.pad.signals[s.index].fill_(s.value)
