"""The inbox exchange every collective is built on.

Each op (``key``) owns a symmetric *inbox* with two halves (epoch parity) and a signal pad
with ``2 * W`` slots: ``ready[q]`` (rank ``q`` has written its part of this call into my
inbox) and ``ack[q]`` (rank ``q`` has finished reading the inbox half I wrote into at this
parity). One call, with ``e = pad.next_epoch()`` and half ``e % 2``:

1. wait ``ack[q] >= e - 2`` for every node peer I push to (the half I am about to overwrite
   was consumed by its owner two calls ago; with two halves this rarely blocks);
2. push my parts into the peers' inboxes with a transfer engine, each raising ``ready[me]``
   to ``e`` on its receiver; peers on other nodes (or every peer with ``engine="network"``)
   exchange through the network engine straight into the local inbox instead;
3. wait ``ready[q] >= e`` for every node peer; the caller reads the half;
4. :meth:`Call.finish` raises ``ack[me]`` to ``e`` on every node peer.

No barrier per call; values only grow (the foundation's epoch protocol). Every rank takes
part in every call (zero-sized parts still signal), so the epochs of all ranks agree.
"""

from __future__ import annotations

import dataclasses

import torch

from ..engines.base import Engine, Signal, Transfer, get_engine
from ..engines.sync import notify_peers, wait_slots
from ..runtime.heap import ALIGNMENT
from ..runtime.signals import SignalPad, signal_pad
from ..runtime.world import current
from .workspaces import alloc_buffers, cached, drop


def _inbox(key: str, nbytes: int) -> torch.Tensor:
    """The op's symmetric inbox ``[2, >= nbytes]`` (uint8), grown in powers of two."""
    rt = current()
    half = max(ALIGNMENT, -(-nbytes // ALIGNMENT) * ALIGNMENT)
    ws = rt.cache.get(("workspace", "inbox", key))
    if ws is not None and ws.tensors[0].shape[1] < half:
        drop(("inbox", key))
        ws = None
    if ws is None:
        cap = 1 << (half - 1).bit_length()
        ws = cached(("inbox", key),
                    lambda: alloc_buffers([((2, cap), torch.uint8, f"inbox:{key}")]))
        from ..runtime.barrier import barrier

        barrier()  # every rank has initialised its inbox before a peer writes into it
    return ws.tensors[0]


def engine_instance(name: str) -> Engine:
    """This process's cached instance of engine ``name`` (engines keep descriptor caches)."""
    engines = current().cache.setdefault("collectives:engines", {})
    if name not in engines:
        engines[name] = get_engine(name)
    return engines[name]


@dataclasses.dataclass
class Part:
    """``data`` (contiguous) goes to ``peer``'s inbox at element ``offset``."""

    peer: int
    data: torch.Tensor
    offset: int


@dataclasses.dataclass
class Call:
    """One exchange in flight: ``inbox`` (flat, the call's half) is valid until ``finish``."""

    pad: SignalPad
    epoch: int
    inbox: torch.Tensor
    node: range
    engines: list[Engine]

    def finish(self) -> None:
        rt = current()
        me = rt.world.rank
        notify_peers(self.pad, rt.world.world_size + me, self.epoch, self.node, skip=me)
        for engine in self.engines:
            engine.drain()
        if rt.wait_timeout > 0 or rt.world.backend == "cpu":
            from ..runtime.diagnostics import check_waits

            check_waits()


def capturing() -> bool:
    """Whether this thread's current CUDA stream is capturing a graph."""
    return torch.cuda.is_available() and torch.cuda.is_current_stream_capturing()


def refuse_capture(what: str) -> None:
    """Raise if a CUDA graph is being captured: the exchange keeps its epochs on the host,
    so a replayed graph would wait for stale signals and read stale inboxes."""
    if capturing():
        raise RuntimeError(f"ditron: {what} keeps per-call state on the host and cannot be "
                           f"captured in a CUDA graph (graph-safe: all_reduce(..., "
                           f"engine='sm'))")


def exchange(key: str, dtype: torch.dtype, inbox_numel: int, parts: list[Part],
             recvs: dict[int, tuple[int, int]], engine: str) -> Call:
    """Move ``parts`` into the peers' inboxes and wait for mine to fill.

    ``recvs[q] = (offset, numel)``: where rank ``q``'s part lands in my inbox (needed for
    peers reached through the network engine). ``engine`` names the engine for node peers;
    ``"network"`` sends every part through the network engine.
    """
    refuse_capture(key)
    rt = current()
    w, me = rt.world.world_size, rt.world.rank
    topo = rt.topo
    pad = signal_pad(key, 2 * w)
    epoch = pad.next_epoch()
    itemsize = torch.empty((), dtype=dtype).element_size()
    raw = _inbox(key, inbox_numel * itemsize)
    inbox = raw[epoch % 2, : inbox_numel * itemsize].view(dtype)
    node = topo.node_ranks()
    remote = (lambda q: True) if engine == "network" else (lambda q: not topo.same_node(q))
    shm = range(0, 0) if engine == "network" else node

    if epoch > 2:
        wait_slots(pad, w, shm, epoch - 2, skip=me)
    engines: list[Engine] = []
    net_transfers = []
    local_transfers = []
    for part in parts:
        region = inbox[part.offset: part.offset + part.data.numel()]
        if part.peer == me:
            region.copy_(part.data.reshape(-1))
        elif remote(part.peer):
            net_transfers.append(Transfer(part.data.reshape(-1), region, me, part.peer))
        else:
            local_transfers.append(Transfer(part.data.reshape(-1), region, me, part.peer,
                                            Signal(pad, me, epoch)))
    for q, (offset, numel) in recvs.items():
        if q != me and remote(q):
            region = inbox[offset: offset + numel]
            net_transfers.append(Transfer(region, region, q, me))
    if net_transfers:
        net = engine_instance("network")
        net.issue(net_transfers)
        engines.append(net)
    if local_transfers:
        eng = engine_instance(engine)
        eng.issue(local_transfers)
        engines.append(eng)
    wait_slots(pad, 0, shm, epoch, skip=me)
    for eng in engines:
        if eng.name == "network":
            eng.drain()
    return Call(pad, epoch, inbox, shm, [e for e in engines if e.name != "network"])
