"""CPU backend: ranks are processes, heaps are POSIX shared memory, kernels are interpreted.

Each rank creates ``/dev/shm/ditron-<job>-<rank>``, every rank of the node maps it, and its
creator unlinks it as soon as everyone has mapped it, so no segment outlives the job even
when a process dies. Triton's interpreter uses CPU tensors in place, so a store through a
translated pointer lands directly in the peer's mapping.
"""

from __future__ import annotations

import os

import torch

from .base import Backend, HeapMapping, Topology, meet

SHM_DIR = "/dev/shm"


def segment_path(job: str, rank: int) -> str:
    return os.path.join(SHM_DIR, f"ditron-{job}-{rank}")


def _map(path: str, nbytes: int, whose: str, rank: int) -> torch.Tensor:
    """The segment at ``path`` (``whose`` heap, for the error) mapped by ``rank``."""
    try:
        return torch.from_file(path, shared=True, size=nbytes, dtype=torch.uint8)
    except RuntimeError as exc:
        raise RuntimeError(f"ditron: rank {rank} cannot map {whose} of {nbytes} bytes "
                           f"(DITRON_HEAP_SIZE, or ditron.init's heap_size): {exc}") from None


def _check_room(nbytes: int, ranks: int, rank: int) -> None:
    """Refuse heaps that ``SHM_DIR`` cannot hold: ``ranks`` heaps of ``nbytes`` (a node's,
    mapped together) beyond its free space. The segments are sparse, so they would map,
    and a process would die of SIGBUS (no Python error) once its pages ran out."""
    st = os.statvfs(SHM_DIR)
    free = st.f_bavail * st.f_frsize
    if nbytes * ranks > free:
        raise RuntimeError(
            f"ditron: rank {rank}: the symmetric heaps of the node's {ranks} rank"
            f"{'s' if ranks > 1 else ''} ({ranks} x {nbytes} bytes: DITRON_HEAP_SIZE, or "
            f"ditron.init's heap_size) do not fit in {SHM_DIR}, which has {free} bytes "
            f"free; lower the heap size or enlarge {SHM_DIR} (docker run --shm-size)")


class CpuBackend(Backend):
    name = "cpu"
    dist_backend = "gloo"
    polls_per_second = 4000.0

    def device(self, local_rank: int, local_world_size: int) -> torch.device:
        return torch.device("cpu")

    def prepare_process(self, device: torch.device, local_world_size: int) -> None:
        from .. import interpret

        if not interpret.active():
            raise RuntimeError(
                "ditron cpu backend: Triton's interpreter is not active in this process. "
                "Import ditron before any module that defines @triton.jit kernels, or set "
                "TRITON_INTERPRET=1 before starting Python."
            )
        if not interpret.kernels_interpreted():
            raise RuntimeError(
                "ditron cpu backend: this process imported ditron with the cuda backend as "
                "its default (DITRON_BACKEND not 'cpu', or unset where a GPU is visible), so "
                "ditron's kernels were built for the GPU, not for Triton's interpreter. Set "
                "DITRON_BACKEND=cpu before starting Python, or start the ranks with "
                "ditron.launch(..., backend='cpu')."
            )
        # Ranks share the machine's cores; one intra-op thread each avoids oversubscription.
        torch.set_num_threads(1)

    def map_heap(self, nbytes: int, topo: Topology, groups, job: str) -> HeapMapping:
        host = groups.host if groups is not None else None
        own = segment_path(job, topo.rank)
        created = False
        try:
            failure = local = None
            try:
                _check_room(nbytes, len(topo.node_ranks()), topo.rank)
                fd = os.open(own, os.O_CREAT | os.O_EXCL | os.O_RDWR, 0o600)
                created = True
                try:
                    os.ftruncate(fd, nbytes)
                finally:
                    os.close(fd)
                local = _map(own, nbytes, f"its own heap ({own})", topo.rank)
            except Exception as exc:  # noqa: BLE001 - told to the peers, raised on every rank
                failure = exc
            meet(host, "ditron.init: creating the symmetric heaps", failure)
            peers: list[torch.Tensor | None] = [None] * topo.world_size
            try:
                for r in topo.node_ranks():
                    path = segment_path(job, r)
                    peers[r] = local if r == topo.rank else _map(
                        path, nbytes, f"rank {r}'s heap ({path})", topo.rank)
            except Exception as exc:  # noqa: BLE001 - as above
                failure = exc
            meet(host, "ditron.init: mapping the peers' symmetric heaps", failure)
        finally:
            if created:
                os.unlink(own)
        bases = [p.data_ptr() if p is not None else 0 for p in peers]
        return HeapMapping(local=local, peers=peers, bases=bases)
