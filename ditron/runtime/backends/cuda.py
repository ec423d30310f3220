"""CUDA backend: one process per rank, peers' heaps mapped by torch's symmetric memory.

The heap is one ``torch.distributed._symmetric_memory`` buffer rendezvoused once over the
node's ranks; its ``buffer_ptrs`` are the base table. With more ranks than GPUs, ranks share
GPUs round-robin (how multi-rank code is tested on one GPU): torch then needs
``TORCH_SYMM_MEM_ALLOW_OVERLAPPING_DEVICES=1`` and host collectives go through gloo. A world
of one rank needs no rendezvous and uses a plain allocation.
"""

from __future__ import annotations

import os

import torch
import torch.distributed as dist

from .base import Backend, HeapMapping, Topology

# NVLink multicast stays off (see REFERENCES.md): Ditron never uses it.
_NO_MULTICAST = {
    "NCCL_NVLS_ENABLE": "0",
    "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1",
    "NVSHMEM_DISABLE_NVLS": "1",
}


class CudaBackend(Backend):
    name = "cuda"
    dist_backend = "nccl"
    polls_per_second = 2.0e6

    def device(self, local_rank: int, local_world_size: int) -> torch.device:
        count = torch.cuda.device_count()
        if count == 0:
            raise RuntimeError("ditron cuda backend: no CUDA device is visible")
        return torch.device("cuda", local_rank % count)

    def shares_devices(self, local_world_size: int) -> bool:
        return local_world_size > torch.cuda.device_count()

    def prepare_process(self, device: torch.device, local_world_size: int) -> None:
        from .. import interpret

        if interpret.active():
            raise RuntimeError(f"ditron cuda backend: {interpret.NOT_WITH_CUDA}.")
        for key, value in _NO_MULTICAST.items():
            os.environ.setdefault(key, value)
        if self.shares_devices(local_world_size):
            os.environ.setdefault("TORCH_SYMM_MEM_ALLOW_OVERLAPPING_DEVICES", "1")
        torch.cuda.set_device(device)

    def map_heap(self, nbytes: int, topo: Topology, groups, job: str) -> HeapMapping:
        device = torch.device("cuda", torch.cuda.current_device())
        node_ranks = list(topo.node_ranks())
        if len(node_ranks) == 1:
            local = torch.empty(nbytes, dtype=torch.uint8, device=device)
            peers: list[torch.Tensor | None] = [None] * topo.world_size
            peers[topo.rank] = local
            bases = [p.data_ptr() if p is not None else 0 for p in peers]
            return HeapMapping(local=local, peers=peers, bases=bases)

        import torch.distributed._symmetric_memory as symm_mem

        _prefer_cuda_backend(symm_mem)
        node_group = _node_group(topo, groups)
        local = symm_mem.empty(nbytes, dtype=torch.uint8, device=device)
        handle = symm_mem.rendezvous(local, node_group)
        peers = [None] * topo.world_size
        bases = [0] * topo.world_size
        for i, r in enumerate(node_ranks):
            peers[r] = local if r == topo.rank else handle.get_buffer(i, (nbytes,), torch.uint8)
            bases[r] = int(handle.buffer_ptrs[i])
        return HeapMapping(local=local, peers=peers, bases=bases, handle=handle)

    def synchronize(self, device: torch.device) -> None:
        torch.cuda.synchronize(device)


def _node_group(topo: Topology, groups):
    """The gloo group of this rank's node (the world's host group on a single node)."""
    if topo.num_nodes == 1:
        return groups.host
    return dist.new_group([groups.ranks[r] for r in topo.node_ranks()], backend="gloo",
                          use_local_synchronization=True)


def _prefer_cuda_backend(symm_mem) -> None:
    """Use torch's CUDA symmetric-memory allocator where it can be chosen: its NVSHMEM one
    refuses several processes on one GPU. Builds that cannot switch keep their default."""
    try:
        symm_mem.set_backend("CUDA")
    except RuntimeError:
        pass
