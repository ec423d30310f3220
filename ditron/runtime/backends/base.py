"""What a backend provides: a device per rank, a mapped symmetric heap, timing constants.

A backend is the set of translation rules of one kind of hardware. Everything above the
runtime calls these methods and never branches on the backend's name.
"""

from __future__ import annotations

import abc
import dataclasses

import torch
import torch.distributed as dist

from .. import host_rows


@dataclasses.dataclass
class HeapMapping:
    """One rank's view of every rank's symmetric heap.

    ``local`` is this rank's heap (uint8); ``peers[r]`` is rank ``r``'s heap as mapped here,
    or ``None`` for ranks on other nodes; ``bases[r]`` is its address (0 when unmapped).
    """

    local: torch.Tensor
    peers: list[torch.Tensor | None]
    bases: list[int]
    handle: object = None


@dataclasses.dataclass(frozen=True)
class Topology:
    """Ranks grouped into nodes of ``local_world_size`` consecutive ranks."""

    rank: int
    world_size: int
    local_world_size: int

    @property
    def node(self) -> int:
        return self.rank // self.local_world_size

    @property
    def local_rank(self) -> int:
        return self.rank % self.local_world_size

    @property
    def num_nodes(self) -> int:
        return -(-self.world_size // self.local_world_size)

    def node_of(self, rank: int) -> int:
        return rank // self.local_world_size

    def same_node(self, rank: int) -> bool:
        return self.node_of(rank) == self.node

    def node_ranks(self, node: int | None = None) -> range:
        node = self.node if node is None else node
        start = node * self.local_world_size
        return range(start, min(start + self.local_world_size, self.world_size))


class Backend(abc.ABC):
    """Translation rules of one backend (see ``cpu.py`` and ``cuda.py``)."""

    name: str
    #: torch.distributed backend for host collectives when every rank has its own device.
    dist_backend: str
    #: rough number of ``wait`` polls per second, to turn a timeout into a poll budget.
    polls_per_second: float

    @abc.abstractmethod
    def device(self, local_rank: int, local_world_size: int) -> torch.device:
        """The device a rank computes on."""

    def shares_devices(self, local_world_size: int) -> bool:
        """True when several ranks of a node use one device (host collectives then use gloo)."""
        return False

    def prepare_process(self, device: torch.device, local_world_size: int) -> None:
        """Per-process set-up before the process group exists."""

    @abc.abstractmethod
    def map_heap(self, nbytes: int, topo: Topology, groups, job: str) -> HeapMapping:
        """Allocate this rank's heap and map the heaps of the ranks on its node (collective
        over the world's ranks; ``groups``: its :class:`~ditron.runtime.groups.Groups`).
        A step that fails on one rank fails on every rank (:func:`meet`), having released
        what it had acquired."""

    def unmap_heap(self, mapping: HeapMapping) -> None:
        """Release what ``map_heap`` acquired."""

    def synchronize(self, device: torch.device) -> None:
        """Wait until the device has finished all queued work."""


def meet(group, what: str, failure: Exception | None) -> None:
    """Meet the ranks of the host ``group`` (``None``: this rank alone) after a step
    ``what`` that each rank takes on its own (``failure``: its error there, or ``None``),
    on the host rows: where the step failed on any rank, ``failure`` is raised on its rank
    and, on every other rank, a ``RuntimeError`` naming each failed rank and its error.
    (A plain barrier, which a rank whose step failed skips, left its peers waiting for it
    until the group's timeout.)"""
    if group is None or dist.get_world_size(group) == 1:
        if failure is not None:
            raise failure
        return
    problem = None if failure is None else f"{type(failure).__name__}: {failure}"
    rows = host_rows.exchange(group, what, ("problem",), (problem,),
                              host_rows.OK if failure is None else host_rows.PROBLEM)
    if (calls := rows.different_calls()) is not None:
        raise RuntimeError(f"{what}: ranks are in different collective calls:\n{calls}")
    if failure is not None:
        raise failure
    failed = [f"  rank {r}: {call[2][0]}" for r, (kind, call)
              in enumerate(zip(rows.kinds, rows.calls or (), strict=False))
              if kind == host_rows.PROBLEM]
    if failed:
        raise RuntimeError(f"{what} failed on {'a rank' if len(failed) == 1 else 'ranks'} "
                           f"(raised there too):\n" + "\n".join(failed))
