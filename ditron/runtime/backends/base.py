"""What a backend provides: a device per rank, a mapped symmetric heap, timing constants.

A backend is the set of translation rules of one kind of hardware. Everything above the
runtime calls these methods and never branches on the backend's name.
"""

from __future__ import annotations

import abc
import dataclasses

import torch


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
        over the world's ranks; ``groups``: its :class:`~ditron.runtime.groups.Groups`)."""

    def unmap_heap(self, mapping: HeapMapping) -> None:
        """Release what ``map_heap`` acquired."""

    def synchronize(self, device: torch.device) -> None:
        """Wait until the device has finished all queued work."""
