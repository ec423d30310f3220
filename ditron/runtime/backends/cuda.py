"""CUDA backend: one process per rank, peers' heaps mapped by torch's symmetric memory.

The heap is one ``torch.distributed._symmetric_memory`` buffer rendezvoused once over the
node's ranks; its ``buffer_ptrs`` are the base table. With more ranks than GPUs, ranks share
GPUs round-robin (how multi-rank code is tested on one GPU): torch then needs
``TORCH_SYMM_MEM_ALLOW_OVERLAPPING_DEVICES=1`` and host collectives go through gloo. A world
of one rank needs no rendezvous and uses a plain allocation. An allocation or rendezvous
that fails on one rank fails on every rank, naming it (a rank that fails inside torch's
rendezvous after its peers entered it still leaves them waiting there).
"""

from __future__ import annotations

import os

import torch
import torch.distributed as dist

from .base import Backend, HeapMapping, Topology, meet

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
        alone = len(node_ranks) == 1  # every rank meets its peers twice, alone or not
        failure = local = None
        try:
            if alone:
                local = torch.empty(nbytes, dtype=torch.uint8, device=device)
            else:
                import torch.distributed._symmetric_memory as symm_mem

                _prefer_cuda_backend(symm_mem)
                local = symm_mem.empty(nbytes, dtype=torch.uint8, device=device)
        except Exception as exc:  # noqa: BLE001 - told to the peers, raised on every rank
            failure = exc
        meet(groups.host, "ditron.init: allocating the symmetric heaps", failure)
        peers: list[torch.Tensor | None] = [None] * topo.world_size
        bases = [0] * topo.world_size
        handle = None
        try:
            if alone:
                peers[topo.rank], bases[topo.rank] = local, local.data_ptr()
            else:
                handle = symm_mem.rendezvous(local, _node_group(topo, groups))
                for i, r in enumerate(node_ranks):
                    peers[r] = (local if r == topo.rank
                                else handle.get_buffer(i, (nbytes,), torch.uint8))
                    bases[r] = int(handle.buffer_ptrs[i])
        except Exception as exc:  # noqa: BLE001 - as above
            failure = exc
        meet(groups.host, "ditron.init: mapping the peers' symmetric heaps", failure)
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
