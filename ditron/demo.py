"""``ditron demo``: a ring exchange and an all-gather written with the primitives.

Runs on ``world_size`` ranks (4 on the CPU backend by default), checks each result against
torch on the same data and prints one row per rank.
"""

from __future__ import annotations

import os
import time

import torch
import triton
import triton.language as tl

import ditron
import ditron.language as dl


@triton.jit(do_not_specialize=["epoch"])
def ring_exchange_kernel(send, recv, sig, epoch, n, BLOCK: tl.constexpr, ctx):
    """Push ``send`` into the right neighbour's ``recv``; wait for the left one's push."""
    right = (ctx.rank + 1) % ctx.world_size
    dl.put(recv, send, n, right, ctx, BLOCK)
    dl.notify(sig, epoch, right, ctx)
    dl.wait(sig, epoch, ctx)


@triton.jit(do_not_specialize=["epoch"])
def all_gather_kernel(chunk, out, sig, epoch, n, BLOCK: tl.constexpr, ctx):
    """Push the local ``chunk`` (n elements) to slot ``rank`` of every rank's ``out``."""
    peer = 0
    while peer < ctx.world_size:
        dl.put(out + ctx.rank * n, chunk, n, peer, ctx, BLOCK)
        dl.notify(sig + ctx.rank, epoch, peer, ctx)
        peer += 1
    src = 0
    while src < ctx.world_size:
        dl.wait(sig + src, epoch, ctx)
        src += 1


def _rank_demo(n: int, repeats: int) -> dict:
    w = ditron.world()
    if w.local_world_size < w.world_size:
        raise RuntimeError(f"ditron demo: the world spans several nodes ({w.local_world_size} "
                           f"of its {w.world_size} ranks per node); the demo needs one")
    send = ditron.empty((n,), torch.float32, name="ring.send")
    recv = ditron.empty((n,), torch.float32, name="ring.recv")
    chunk = ditron.empty((n,), torch.float32, name="ag.chunk")
    out = ditron.empty((w.world_size * n,), torch.float32, name="ag.out")
    ring_pad = ditron.signal_pad("demo.ring", 1)
    ag_pad = ditron.signal_pad("demo.all_gather", w.world_size)
    ctx = ditron.context()
    gen = torch.Generator().manual_seed(1234)
    ok_ring = ok_ag = True
    start = time.perf_counter()
    for _ in range(repeats):
        # Every rank draws all ranks' data from the same seed: the reference needs no comms.
        data = torch.randn(w.world_size, n, generator=gen)
        send.copy_(data[w.rank].to(w.device))
        chunk.copy_(data[w.rank].to(w.device))
        recv.fill_(float("nan"))
        out.fill_(float("nan"))
        ditron.barrier()  # nobody pushes into a buffer a peer is still poisoning
        ring_exchange_kernel[(1,)](send, recv, ring_pad.signals, ring_pad.next_epoch(), n,
                                   BLOCK=64, ctx=ctx)
        all_gather_kernel[(1,)](chunk, out, ag_pad.signals, ag_pad.next_epoch(), n,
                                BLOCK=64, ctx=ctx)
        ditron.check_waits()
        left = (w.rank - 1) % w.world_size
        ok_ring &= torch.equal(recv.cpu(), data[left])
        ok_ag &= torch.equal(out.cpu(), data.reshape(-1))
        ditron.barrier()  # peers finish reading before the next round overwrites
    elapsed = time.perf_counter() - start
    return {"rank": w.rank, "device": str(w.device), "ring": ok_ring, "all_gather": ok_ag,
            "ms_per_round": 1e3 * elapsed / repeats}


def setup(world_size: int | None = None, n: int = 200,
          backend: str | None = None) -> tuple[int, str]:
    """The demo's ``(world_size, backend)``, defaults filled in; ``ValueError`` before any
    rank starts where it cannot run: the cuda backend without a GPU (the launch refused it
    after the demo's first line), more ranks than :func:`max_ranks` (each is a process:
    ``--world-size 10000`` started ten thousand), heaps that do not fit in ``/dev/shm``
    on the CPU backend (each rank raised it after start-up), ranks on several (simulated,
    ``DITRON_LOCAL_WORLD_SIZE``) nodes, whose heaps the primitives cannot reach (a peer
    store there crashed a rank with SIGSEGV), buffers larger than the symmetric heap
    (``DITRON_HEAP_SIZE``), or an all-gather of ``2**31`` elements or more (the kernel's
    ``rank * n`` is an int32: it wrapped to a negative offset, a push outside the peers'
    buffer)."""
    from .runtime.config import Settings
    from .runtime.heap import ALIGNMENT
    from .runtime.integers import check_int

    settings = Settings.from_env(backend)
    backend = settings.backend
    if backend == "cuda" and torch.cuda.device_count() == 0:  # the launch would refuse it
        raise ValueError(f"the cuda backend, but no CUDA device is visible "
                         f"(CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES', 'unset')}"
                         f"); use --backend cpu (or DITRON_BACKEND=cpu)")
    if world_size is None:
        world_size = 4 if backend == "cpu" else max(torch.cuda.device_count(), 2)
    world_size = check_int(world_size, "--world-size", 1)
    _check_rank_count(world_size, backend)
    node = settings.local_world_size
    if node is not None and node < world_size:
        raise ValueError(f"DITRON_LOCAL_WORLD_SIZE={node} puts the {world_size} ranks on "
                         f"several nodes; the demo's kernels store into every peer's heap, "
                         f"which needs one node: unset it or use --world-size {node}")
    if world_size * n > _MAX_ELEMENTS:
        raise ValueError(f"--n {n} on {world_size} ranks: the all-gather's {world_size * n} "
                         f"elements pass the kernels' int32 offsets (at most {_MAX_ELEMENTS}); "
                         f"lower --n")
    # ring.send, ring.recv, ag.chunk, ag.out (fp32), the two signal pads and the barrier's
    # (int64), each in whole blocks of the heap's alignment
    need = sum(-(-nbytes // ALIGNMENT) * ALIGNMENT
               for nbytes in (4 * n, 4 * n, 4 * n, 4 * n * world_size, 16, 8 * world_size + 8,
                              8 * world_size))
    if need > settings.heap_size // ALIGNMENT * ALIGNMENT:
        raise ValueError(f"--n {n} on {world_size} ranks needs {need} bytes of symmetric heap "
                         f"per rank, more than DITRON_HEAP_SIZE ({settings.heap_size} bytes); "
                         f"lower --n or raise DITRON_HEAP_SIZE")
    if backend == "cpu":
        _check_shared_memory(world_size, settings.heap_size, need)
    return world_size, backend


#: the most elements of the all-gather's output (its offsets are int32 in the kernel)
_MAX_ELEMENTS = 2**31 - 1
#: the most ranks on the cpu backend, where a machine has fewer cores (every rank is a
#: process; 48 ranks on 2 cores ran the demo in 43 s)
_CPU_RANKS = 64
#: the most ranks sharing one GPU on the cuda backend (each holds a CUDA context and its
#: heap, DITRON_HEAP_SIZE, on the GPU)
_RANKS_PER_GPU = 8


def max_ranks(backend: str) -> int | None:
    """The most ranks the demo starts on ``backend``: on the cpu backend ``_CPU_RANKS`` or
    one per CPU core where there are more; on the cuda backend ``_RANKS_PER_GPU`` per
    visible GPU (ranks beyond the GPUs share them round-robin, as multi-rank code is tested
    on few GPUs); ``None`` without a GPU (the launch refuses the cuda backend there)."""
    if backend == "cpu":
        return max(_CPU_RANKS, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity")
                   else os.cpu_count() or 1)
    gpus = torch.cuda.device_count()
    return gpus * _RANKS_PER_GPU if gpus else None


def _check_rank_count(world_size: int, backend: str) -> None:
    """``ValueError`` where ``world_size`` passes :func:`max_ranks`."""
    most = max_ranks(backend)
    if most is None or world_size <= most:
        return
    why = (f"every rank is a process on this machine: {_CPU_RANKS}, or one per CPU core "
           f"where there are more" if backend == "cpu" else
           f"{_RANKS_PER_GPU} per GPU on the {most // _RANKS_PER_GPU} visible: ranks beyond "
           f"the GPUs share them")
    raise ValueError(f"--world-size {world_size}: the demo runs at most {most} ranks on the "
                     f"{backend} backend here ({why}); lower --world-size")


def _check_shared_memory(world_size: int, heap_size: int, need: int) -> None:
    """``ValueError`` where the ranks' heaps (``heap_size`` bytes each, ``need`` of them
    used) do not fit in the shared-memory folder, as each CPU rank would find after
    start-up (``backends/cpu.py``)."""
    from .runtime.backends.cpu import SHM_DIR

    try:
        st = os.statvfs(SHM_DIR)
    except OSError:  # no such folder: the ranks say so
        return
    free = st.f_bavail * st.f_frsize
    if world_size * heap_size > free:
        raise ValueError(f"the symmetric heaps of {world_size} ranks ({world_size} x "
                         f"{heap_size} bytes, DITRON_HEAP_SIZE) do not fit in {SHM_DIR}, "
                         f"which has {free} bytes free; set DITRON_HEAP_SIZE lower (the demo "
                         f"uses {need} bytes of it) or lower --world-size")


def run(world_size: int | None = None, n: int = 200, repeats: int = 3,
        backend: str | None = None) -> bool:
    """Run the demo on ``world_size`` local ranks (:func:`setup` says what is refused);
    print a row per rank; return whether every result matched torch."""
    world_size, backend = setup(world_size, n, backend)
    print(f"ditron demo: {_count(world_size, 'rank')} on the {backend} backend, {n} fp32 "
          f"per rank, {_count(repeats, 'round')}", flush=True)  # before the ranks' output
    rows = ditron.launch(_rank_demo, world_size, n, repeats, backend=backend)
    print(f"{'rank':>4}  {'device':<8}  {'ring exchange':<13}  {'all-gather':<10}  ms/round")
    for r in rows:
        print(f"{r['rank']:>4}  {r['device']:<8}  {_verdict(r['ring']):<13}  "
              f"{_verdict(r['all_gather']):<10}  {r['ms_per_round']:.1f}")
    ok = all(r["ring"] and r["all_gather"] for r in rows)
    print("all results match torch" if ok else "MISMATCH against torch")
    return ok


def _count(n: int, noun: str) -> str:
    """``1 rank``, ``3 ranks``."""
    return f"{n} {noun}{'' if n == 1 else 's'}"


def _verdict(ok: bool) -> str:
    return "ok" if ok else "WRONG"
