"""``ditron.barrier``: a barrier over the node's ranks built on one signal pad.

Each rank sets its slot on every peer of its node to the barrier's epoch, then waits
until every slot of its own pad has reached it. On CUDA the barrier is ordered in the
current stream (the host does not block); on the CPU backend launches are synchronous,
so it is also a host barrier. Ranks on other nodes are joined through the host group, on
the host rows of every host check (``host_rows``): a rank there beside a peer in another
check raises, naming each rank's call.
"""

from __future__ import annotations

import torch
import torch.distributed as dist
import triton

from .. import language as dl
from . import host_rows
from .diagnostics import WaitTimeoutError, check_waits
from .signals import SignalPad
from .world import current


@triton.jit(do_not_specialize=["epoch"])
def _barrier_kernel(pad_ptr, epoch, first, count, ctx):
    for i in range(0, count):
        dl.notify(pad_ptr + ctx.rank, epoch, first + i, ctx)
    for i in range(0, count):
        dl.wait(pad_ptr + first + i, epoch, ctx)


def _pad() -> SignalPad:
    rt = current()
    pad = rt.cache.get("barrier_pad")
    if pad is None:
        pad = SignalPad.allocate(rt.world.world_size, name="signals:barrier")
        rt.cache["barrier_pad"] = pad
        if rt.world.world_size > 1:
            rt.backend.synchronize(rt.world.device)
            dist.barrier(rt.host_group)
    return pad


@torch.compiler.disable  # in torch.compile'd code: a graph break, run eagerly
def barrier() -> None:
    """Wait until every rank has reached this call (collective).

    In timeout mode a barrier that some rank of the node does not reach in time raises
    :class:`ditron.WaitTimeoutError` and does not count: this rank's next ``barrier()``
    waits for the same arrival again, so a rank that catches the error and carries on
    stays in step with its peers (a peer that arrives late completes that next call)."""
    rt = current()
    pad = _pad()
    epoch = pad.next_epoch()
    node = rt.topo.node_ranks()
    _barrier_kernel[(1,)](pad.signals, epoch, node.start, len(node), rt.context())
    if rt.wait_timeout > 0 or rt.world.backend == "cpu":
        try:
            check_waits()
        except WaitTimeoutError:
            if int(pad.signals[node.start:node.stop].min()) < epoch:  # not every rank came
                pad.epoch -= 1  # signals only grow: setting this epoch again is harmless
            raise
    if rt.topo.num_nodes > 1:
        rt.backend.synchronize(rt.world.device)
        _host_barrier(rt.host_group)


def _host_barrier(group) -> None:
    """A barrier of the nodes on the host rows (``host_rows``): ranks of another node in a
    host check of another call (an allocation, an agreement) raise with this rank, naming
    each rank's call, instead of waiting in mismatched gloo collectives."""
    rows = host_rows.exchange(group, "ditron.barrier", (), ())
    if (calls := rows.different_calls()) is not None:
        raise RuntimeError(f"ditron.barrier: ranks are in different collective calls (a "
                           f"barrier on some, another call on others):\n{calls}")
