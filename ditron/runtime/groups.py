"""The torch.distributed process groups a Ditron world talks through.

A world is the whole job (the default) or a group of its ranks (``ditron.init(group=...)``:
the tensor-parallel group of a TP x DP job, say; the other groups of the job are worlds of
their own, with their own heaps). Its ranks are numbered ``0 .. W-1`` in increasing global
rank, the order of the groups torch.distributed makes. Host collectives (agreement,
barriers, headers) go through ``host`` (gloo); the collectives on device tensors that
Ditron falls back to (NCCL on CUDA when every rank has its own GPU) through ``device``. A
peer is always named to torch.distributed by its rank in these groups (``group_src`` /
``group_dst`` / ``group_peer``), never by its global rank, so every op works unchanged in
a subgroup.
"""

from __future__ import annotations

import dataclasses
import json
import time
import weakref
from collections.abc import Sequence

import torch.distributed as dist

from .integers import as_int

#: the groups made for worlds, by the job's default group, then the ranks and the backend
#: (``None``: the default's): kept past their world's shutdown while that default group
#: lives, and reused by the next world over the same ranks. torch names a group made with
#: local synchronization by its ranks, so one made again after the last was destroyed met
#: the stale keys of its store (gloo: "Connection refused"). Held weakly (torch's own
#: registry keeps them until ``destroy_process_group``): a group held past it kept its gloo
#: threads into the interpreter's exit, where one releasing a collective's tensors took
#: the GIL and aborted the process ("terminate called without an active exception").
_KEPT: weakref.WeakKeyDictionary[
    dist.ProcessGroup, weakref.WeakValueDictionary[tuple[tuple[int, ...], str | None],
                                                   dist.ProcessGroup]
] = weakref.WeakKeyDictionary()


def _group(ranks: tuple[int, ...], backend: str | None, whole: bool) -> dist.ProcessGroup:
    """A process group of the global ``ranks`` (``backend``: ``None`` for the default
    one's), the one an earlier world of this default group used if any (:data:`_KEPT`).
    ``whole``: the ranks are the job's, whose group every rank makes."""
    kept = _KEPT.setdefault(dist.group.WORLD, weakref.WeakValueDictionary())
    group = kept.get((ranks, backend))
    if group is None:
        group = kept[(ranks, backend)] = (
            dist.new_group(backend=backend) if whole else
            dist.new_group(list(ranks), backend=backend, use_local_synchronization=True))
    return group


#: worlds of more than one rank this process has started making with each other global
#: rank, by the job's default group (held weakly, as in :data:`_KEPT`), then that rank:
#: the number of the next one, which keys the store entries of :func:`meet_members` (ranks
#: sharing several worlds make them in the same order, so a pair counts alike)
_MADE_WITH: weakref.WeakKeyDictionary[dist.ProcessGroup, dict[int, int]] = \
    weakref.WeakKeyDictionary()
#: the largest world whose members :func:`meet_members` checks (each pair of members meets
#: through the store: ~5 W^2 store operations, about 0.5 s in all at 64 ranks)
CHECKED_MEMBERS = 64


def meet_members(ranks: tuple[int, ...]) -> None:
    """Before any group of a new world over the global ``ranks`` is made: meet its other
    members through the job's store and check that each is making this very world as its
    next one with this rank. ``ValueError`` on every rank that meets a member making
    another (one called ``init`` with another group, or ranks sharing several worlds make
    them in different orders), and on the members it tells: each would otherwise wait in a
    different group for ever, or until gloo's timeout. The ranks of every world named then
    count it as made, so that they can make worlds again. ``RuntimeError`` naming the
    members that did not come within the store's timeout (the process group's). Worlds of
    more than :data:`CHECKED_MEMBERS` ranks are not checked."""
    me = dist.get_rank()
    peers = [p for p in ranks if p != me]
    if not peers or len(ranks) > CHECKED_MEMBERS:
        return
    try:  # torch's own store of the default group (no public accessor)
        store = dist.distributed_c10d._get_default_store()
    except (AttributeError, RuntimeError, ValueError):
        return  # a torch without it: the members are not checked
    made = _MADE_WITH.setdefault(dist.group.WORLD, {})
    number = {p: made.get(p, 0) for p in peers}
    for p in peers:
        made[p] = number[p] + 1
        store.set(f"ditron/world/{me}-{p}/{number[p]}", json.dumps(ranks))
    pending, worlds = set(peers), {me: list(ranks)}
    deadline, pause = time.monotonic() + store.timeout.total_seconds(), 0.001
    while pending:
        told = next((p for p in peers
                     if store.check([f"ditron/refused/{p}-{me}/{number[p]}"])), None)
        if told is not None:  # passed on: members only this rank tells wait for it
            key = f"ditron/refused/{told}-{me}/{number[told]}"
            named, message = json.loads(store.get(key))
            store.delete_key(key)  # read once, here: left, a later process group's would meet it
            _refuse(store, me, number, named, message, ranks)
        for p in sorted(pending):
            key = f"ditron/world/{p}-{me}/{number[p]}"
            if store.check([key]):
                pending.discard(p)
                worlds[p] = json.loads(store.get(key))
                store.delete_key(key)  # keys left would meet a later process group's
        if any(w != list(ranks) for w in worlds.values()):
            makes = "\n".join(f"  global rank {p} makes the world of ranks {w}"
                              for p, w in sorted(worlds.items()))
            message = (f"ditron.init: members of a new world are making different worlds "
                       f"(each member must call ditron.init with the same group, and ranks "
                       f"that share several worlds must make them in the same order):\n"
                       f"{makes}")
            _refuse(store, me, number, sorted({r for w in worlds.values() for r in w}),
                    message, ranks)
        if pending and time.monotonic() > deadline:
            raise RuntimeError(f"ditron.init: global ranks {sorted(pending)} did not start "
                               f"making the world of ranks {list(ranks)} within "
                               f"{store.timeout.total_seconds():.0f} s (the process group's "
                               f"timeout): only the group's members call ditron.init, all "
                               f"with the group")
        time.sleep(pause)
        pause = min(2 * pause, 0.05)


def _refuse(store, me: int, number: dict[int, int], named: list[int], message: str,
            ranks: tuple[int, ...]) -> None:
    """Raise ``ValueError(message)`` after telling the other members of this world (their
    entries ``number``) through ``store``; then count a world made with each rank of the
    worlds ``named`` that :func:`meet_members` did not count yet (those of ``ranks``)."""
    for p, n in number.items():
        store.set(f"ditron/refused/{me}-{p}/{n}", json.dumps([named, message]))
    made = _MADE_WITH.setdefault(dist.group.WORLD, {})
    for p in named:
        if p != me and p not in ranks:
            made[p] = made.get(p, 0) + 1
    raise ValueError(message)


@dataclasses.dataclass(frozen=True)
class Groups:
    """A world's ranks and process groups. ``ranks[r]``: the global rank of world rank ``r``;
    ``created``: the groups :func:`world_groups` made for it (kept for the next world over
    the same ranks while the job's default group lives: :data:`_KEPT`)."""

    ranks: tuple[int, ...]
    host: dist.ProcessGroup
    device: dist.ProcessGroup
    created: tuple[dist.ProcessGroup, ...] = ()

    @property
    def whole_job(self) -> bool:
        return len(self.ranks) == dist.get_world_size()

    @property
    def device_backend(self) -> str:
        return dist.get_backend(self.device)

    def subgroup(self, world_ranks: Sequence[int]) -> dist.ProcessGroup:
        """A new group (the default backend) of the given world ranks. Only those ranks call
        this, each with the same list."""
        return dist.new_group([self.ranks[r] for r in world_ranks],
                              use_local_synchronization=True)


def group_ranks(group, job_size: int) -> tuple[int, ...]:
    """The global ranks of ``group`` (``None``: the whole job; a ``ProcessGroup``; or a
    sequence of global ranks), in increasing order; ``ValueError`` if they are not distinct
    ranks of the job."""
    if group is None or group is dist.group.WORLD:
        return tuple(range(job_size))
    if isinstance(group, dist.ProcessGroup):
        return tuple(sorted(dist.get_process_group_ranks(group)))
    if type(group) is int and group == dist.GroupMember.NON_GROUP_MEMBER:
        raise ValueError("ditron.init: this process is not a member of the group "
                         "(torch.distributed.new_group gave it GroupMember.NON_GROUP_MEMBER); "
                         "only the group's members call ditron.init")
    if isinstance(group, (str, bytes)) or not isinstance(group, Sequence):
        raise ValueError(f"ditron.init: group must be a torch.distributed ProcessGroup or a "
                         f"sequence of global ranks, got {group!r}")
    ranks = [as_int(r) for r in group]
    if (not ranks or None in ranks
            or len(set(ranks)) != len(ranks) or not all(0 <= r < job_size for r in ranks)):
        raise ValueError(f"ditron.init: group must list distinct global ranks in "
                         f"[0, {job_size}), got {group!r}")
    return tuple(sorted(ranks))


def world_groups(group) -> Groups:
    """The groups of this process's world (after the job's default group exists). For a
    subgroup, only its members call this (groups are made with local synchronization)."""
    me = dist.get_rank()
    ranks = group_ranks(group, dist.get_world_size())
    if me not in ranks:
        raise ValueError(f"ditron.init: this process (global rank {me}) is not in the group "
                         f"{list(ranks)}")
    meet_members(ranks)
    default_gloo = dist.get_backend() == "gloo"
    if ranks == tuple(range(dist.get_world_size())):
        world = dist.group.WORLD
        if default_gloo:
            return Groups(ranks, world, world)
        host = _group(ranks, "gloo", whole=True)
        return Groups(ranks, host, world, (host,))
    given = None  # a ProcessGroup whose group ranks are the world ranks is used as it is
    if isinstance(group, dist.ProcessGroup) and all(
            dist.get_global_rank(group, r) == g for r, g in enumerate(ranks)):
        given = group
    created = []
    if given is not None and dist.get_backend(given) == "gloo":
        host = given
    else:
        host = _group(ranks, "gloo", whole=False)
        created.append(host)
    if given is not None:
        device = given
    elif default_gloo:
        device = host
    else:
        device = _group(ranks, None, whole=False)
        created.append(device)
    return Groups(ranks, host, device, tuple(created))


def nodes_of(ranks: Sequence[int], node_size: int) -> int:
    """Ranks per node of a world made of global ``ranks`` when the job's nodes hold
    ``node_size`` consecutive global ranks each. Ditron's nodes are blocks of that many
    consecutive world ranks (the last one may be shorter); ``ValueError`` if the group's
    ranks do not fall into such blocks."""
    nodes = [g // node_size for g in ranks]
    per_node = nodes.count(nodes[0])
    blocks = [nodes[i:i + per_node] for i in range(0, len(nodes), per_node)]
    if (any(len(set(b)) != 1 for b in blocks) or len({b[0] for b in blocks}) != len(blocks)
            or any(len(b) != per_node for b in blocks[:-1])):
        raise ValueError(f"ditron.init: the group's ranks {list(ranks)} must fill nodes in "
                         f"equal blocks of consecutive ranks (nodes of {node_size} ranks: "
                         f"{nodes})")
    return per_node
