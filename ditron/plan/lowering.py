"""Lowering a chunk plan to transfers that actually move data, with the one signal protocol.

Three targets, one plan:

* **engines** (``copy_engine``, ``sm``, ``tma``): :func:`engine_transfers` turns the intra-node
  transfers a rank issues into ``engines.base.Transfer`` objects (tensor views of the chunk
  rows, a :class:`~ditron.engines.base.Signal` = the chunk's slot raised to the epoch on the
  destination) and :func:`issue` hands them to ``get_engine(name)``.
* **colocated** (inside the compute kernel): the consumer GEMM loads the chunk rows straight
  from the owner's heap after waiting on the chunk signal; the owner only has to
  :func:`publish` its chunks (set their signals on every rank of its node to the epoch, with
  release semantics, after the data is in its symmetric buffer).
* **network** (``inter`` transfers between nodes): the collective stage of a hierarchical plan
  runs through ``torch.distributed`` on the group of ranks that share a local index
  (:func:`network_all_gather`).
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Sequence

import torch
import triton
import triton.language as tl

from .. import language as dl
from ..runtime.integers import check_int
from ..runtime.torch_dist import all_gather_single
from ..runtime.triton_launch import FastKernel
from ..runtime.world import current
from .ir import Chunk, Plan, Transfer, find_cycle


@triton.jit(do_not_specialize=["epoch"])
def _publish_kernel(sig_ptr, chunk_ptr, n_chunks, epoch, first_peer, n_peers, ctx):
    p = 0
    while p < n_peers:
        j = 0
        while j < n_chunks:
            c = tl.load(chunk_ptr + j)
            dl.notify(sig_ptr + c, epoch, first_peer + p, ctx)
            j += 1
        p += 1


_FAST_PUBLISH = FastKernel(_publish_kernel)


def publish(signals: torch.Tensor, chunk_ids: torch.Tensor, epoch: int, peers: range,
            ctx) -> None:
    """Set ``signals[c] = epoch`` for every ``c`` in ``chunk_ids`` on every rank of ``peers``
    (a contiguous range of ranks of this rank's node), ordered after this rank's earlier
    writes on the same stream (release at system scope). ``chunk_ids``: a contiguous int32
    vector of slots of ``signals``, on the signals' device (ids outside the pad are refused,
    read back once per tensor and version). A peer outside the node (whose heap is not
    mapped here) is refused (``ValueError``) before the launch."""
    if chunk_ids.device != signals.device:
        raise ValueError(f"publish: chunk_ids are on {chunk_ids.device}, the signals on "
                         f"{signals.device}; the kernel reads both")
    _check_chunk_ids(chunk_ids, signals.numel())
    if not isinstance(peers, range) or peers.step != 1:  # it notifies peers.start + p
        raise ValueError(f"publish: peers must be a contiguous range of ranks, got {peers}")
    if chunk_ids.numel() == 0 or len(peers) == 0:
        return
    node = current().topo.node_ranks()
    if peers.start < node.start or peers.stop > node.stop:
        raise ValueError(f"publish: peers {peers} reach past this rank's node {node} (ranks "
                         f"outside the world or on another node: their heaps are not "
                         f"mapped here)")
    _FAST_PUBLISH[(1,)](signals, chunk_ids, chunk_ids.numel(), epoch, peers.start,
                        len(peers), ctx)


def _check_chunk_ids(chunk_ids: torch.Tensor, n_signals: int) -> None:
    """``ValueError`` unless ``chunk_ids`` is a contiguous int32 vector of slots of a pad of
    ``n_signals`` (an id past it would be raised in the memory after the pad on every peer).
    Read back once per tensor and version (an in-place change reads it again): the tensor
    remembers what passed in an attribute."""
    if chunk_ids.dtype != torch.int32 or chunk_ids.dim() != 1 or not chunk_ids.is_contiguous():
        raise ValueError(f"publish: chunk_ids must be a contiguous 1-D int32 tensor, got "
                         f"{chunk_ids.dtype} of shape {list(chunk_ids.shape)} and strides "
                         f"{list(chunk_ids.stride())}")
    seen = (chunk_ids._version, n_signals)
    if getattr(chunk_ids, "_ditron_ids_checked", None) == seen or chunk_ids.numel() == 0:
        return
    lo, hi = (int(v) for v in torch.aminmax(chunk_ids))
    if lo < 0 or hi >= n_signals:
        raise ValueError(f"publish: chunk ids must be slots of the pad, 0 to {n_signals - 1}; "
                         f"got ids from {lo} to {hi}")
    chunk_ids._ditron_ids_checked = seen


def engine_transfers(plan: Plan, rank: int, src_view: Callable[[Chunk, int], torch.Tensor],
                     dst_view: Callable[[Chunk, int], torch.Tensor], pad, epoch: int):
    """The intra-node transfers ``rank`` issues, as engine transfers.

    ``src_view(chunk, src_rank)`` / ``dst_view(chunk, dst_rank)`` return the chunk's rows as
    the issuing rank sees them (a local tensor or a view of a symmetric tensor). Each
    transfer raises the chunk's slot of ``pad`` to ``epoch`` on its destination, that of a
    chunk of zero rows too (the engine moves nothing and only raises the signal): a row
    block's chunk range (``deps.consumer_waits``) may pass over such a chunk and wait for
    it. A chunk's slot on a rank stands for one transfer landing it there, so a plan that
    lands a chunk twice on one rank (e.g. sums several partials into it, a reduce-scatter
    over more than two ranks: the engines sum without atomics and would lose updates) is
    refused (``ValueError``) on every rank; so is a ``rank`` outside the plan.

    Dependencies: an ``inter`` transfer in ``after`` (the network stage) must have landed
    before this is called. An ``intra`` one that brought the same chunk to the issuing
    rank, the only transfer landing it there (a ring's forward), becomes the engine
    transfer's ``after`` (that slot on the issuing rank at ``epoch``; engines with
    ``can_wait``, e.g. the copy engine, honour it, the others refuse it). Any other
    ``intra`` dependency (a chunk landing elsewhere, or in several parts) cannot be waited
    for by an engine, and a rank's engine runs its transfers in plan order, so a transfer
    waiting, directly or through other ranks' transfers, for one its issuer issues after
    it would wait forever: both ``ValueError`` on every rank, before any transfer (lower
    such plans stage by stage, or reorder them).
    """
    from ..engines.base import Signal
    from ..engines.base import Transfer as EngineTransfer

    check_int(rank, f"engine_transfers: rank of plan {plan.name}", 0,
              plan.world_size)
    _check_lowerable(plan)
    out = []
    for t in plan.issued_by(rank):
        if t.level != "intra":
            continue
        chunk = plan.chunks[t.chunk]
        slot = Signal(pad, chunk.id, epoch)  # raised on dst; waited for on rank (after)
        out.append(EngineTransfer(src=src_view(chunk, t.src), dst=dst_view(chunk, t.dst),
                                  src_rank=t.src, dst_rank=t.dst, signal=slot,
                                  reduce=t.reduce,
                                  after=_engine_after(plan, t, rank, slot) if t.after else None))
    return out


#: plans :func:`_check_lowerable` passed, by ``id`` (a plan is checked once, not on every call)
_CHECKED: weakref.WeakValueDictionary[int, Plan] = weakref.WeakValueDictionary()


def _check_lowerable(plan: Plan) -> None:
    """``ValueError`` where ``plan``'s intra-node transfers cannot all run on the engines
    (:func:`engine_transfers`), the same on every rank: a chunk landing twice on one rank
    (its one signal there says it has landed when the first has; partials summed at once
    lose updates), a dependency no one signal stands for (:func:`_engine_after`), or a
    transfer waiting, directly or through other ranks' transfers, for one its issuer
    issues after it (each rank's engine runs its transfers in plan order: a deadlock).
    Checked once per plan object (plans are immutable)."""
    if _CHECKED.get(id(plan)) is plan:
        return
    intra = [t for t in plan.transfers if t.level == "intra"]
    landing: dict[tuple[int, int], list[Transfer]] = {}
    for t in intra:
        landing.setdefault((t.chunk, t.dst), []).append(t)
    for (chunk_id, dst), ts in landing.items():
        if len(ts) > 1 and all(t.reduce for t in ts):
            raise ValueError(f"engine_transfers: plan {plan.name} sums the partials of ranks "
                             f"{[t.src for t in ts]} into chunk {chunk_id} on rank {dst}; the "
                             f"engines sum without atomics, so partials landing at once would "
                             f"lose updates (one summing transfer per chunk and destination)")
        if len(ts) > 1:
            raise ValueError(f"engine_transfers: plan {plan.name} lands chunk {chunk_id} on "
                             f"rank {dst} {len(ts)} times (transfers {[t.id for t in ts]}); "
                             f"its one signal there is raised by the first to land, so the "
                             f"rows would be read while another still writes them (one "
                             f"transfer per chunk and destination)")
    for t in intra:
        later = [d for d in t.after if d > t.id and plan.transfers[d].level == "intra"
                 and plan.transfers[d].issuer == t.issuer]
        if later:  # a rank's engine runs its transfers in plan order
            raise ValueError(f"engine_transfers: transfer {t.id} of plan {plan.name} waits "
                             f"for transfers {later}, which rank {t.issuer} issues after it "
                             f"(a rank issues its transfers in plan order): its engine "
                             f"would wait forever; put them before it")
        if t.after:
            _engine_after(plan, t, t.issuer, None)
    _check_issue_order(plan, intra)
    _CHECKED[id(plan)] = plan


def _check_issue_order(plan: Plan, intra: list[Transfer]) -> None:
    """``ValueError`` naming a cycle of intra-node transfers, each waiting for the next
    through ``after`` or through its issuer's engine (which runs the issuer's earlier
    transfers first)."""
    waits: dict[int, list[int]] = {t.id: [d for d in t.after
                                          if plan.transfers[d].level == "intra"] for t in intra}
    last: dict[int, int] = {}
    for t in intra:  # issue order: a transfer starts after its issuer's previous one
        if t.issuer in last:
            waits[t.id].append(last[t.issuer])
        last[t.issuer] = t.id
    cycle = find_cycle(waits)
    if cycle is not None:
        raise ValueError(f"engine_transfers: transfers {' -> '.join(map(str, cycle))} of plan "
                         f"{plan.name} each wait for the next (through after, or issued "
                         f"later by the same rank, whose engine runs its transfers in plan "
                         f"order): they would wait forever; reorder the plan's transfers")


def _engine_after(plan: Plan, t: Transfer, rank: int, slot):
    """``slot`` (the signal of ``t``'s chunk on ``rank``) where it stands for ``t.after``'s
    intra-node transfers, ``None`` where there are none; ``ValueError`` where no one
    signal does."""
    deps = [plan.transfers[d] for d in t.after if plan.transfers[d].level == "intra"]
    if not deps:
        return None
    if len(deps) == 1 and [u for u in plan.incoming(rank) if u.chunk == t.chunk] == deps:
        return slot
    raise ValueError(f"engine_transfers: transfer {t.id} of plan {plan.name} (chunk {t.chunk}, "
                     f"{t.src} -> {t.dst}) waits for transfers {[d.id for d in deps]}, which "
                     f"no one signal of rank {rank} stands for (an engine waits for one, "
                     f"the slot of a chunk only it lands on the issuing rank); lower the "
                     f"plan stage by stage")


def issue(engine_name: str, transfers: Sequence, **options):
    """Start ``transfers`` on the named engine; return the engine (call ``drain()``)."""
    from ..engines.base import get_engine

    engine = get_engine(engine_name, **options)
    engine.issue(list(transfers))
    return engine


def local_index_group(rt):
    """The process group of the world's ranks with this rank's local index, one per node
    (made on first use by those ranks only)."""
    key = ("local_index_group", rt.world.world_size, rt.world.local_world_size)
    if key not in rt.cache:
        L = rt.world.local_world_size
        rt.cache[key] = rt.groups.subgroup(range(rt.world.local_rank, rt.world.world_size, L))
    return rt.cache[key]


def network_all_gather(out: torch.Tensor, shard: torch.Tensor, group) -> None:
    """``out`` (``[nodes * rows, ...]``) = the shards of the ranks of ``group`` in rank
    order (the ``inter`` stage of ``templates.all_gather_2d``)."""
    all_gather_single(out, shard.contiguous(), group=group)
