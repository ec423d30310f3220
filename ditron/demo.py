"""``ditron demo``: a ring exchange and an all-gather written with the primitives.

Runs on ``world_size`` ranks (4 on the CPU backend by default), checks each result against
torch on the same data and prints one row per rank.
"""

from __future__ import annotations

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


def run(world_size: int | None = None, n: int = 200, repeats: int = 3,
        backend: str | None = None) -> bool:
    from .runtime.config import default_backend

    backend = backend or default_backend()
    if world_size is None:
        world_size = 4 if backend == "cpu" else max(torch.cuda.device_count(), 2)
    print(f"ditron demo: {world_size} ranks on the {backend} backend, {n} fp32 per rank, "
          f"{repeats} rounds")
    rows = ditron.launch(_rank_demo, world_size, n, repeats, backend=backend)
    print(f"{'rank':>4}  {'device':<8}  {'ring exchange':<13}  {'all-gather':<10}  ms/round")
    for r in rows:
        print(f"{r['rank']:>4}  {r['device']:<8}  {_verdict(r['ring']):<13}  "
              f"{_verdict(r['all_gather']):<10}  {r['ms_per_round']:.1f}")
    ok = all(r["ring"] and r["all_gather"] for r in rows)
    print("all results match torch" if ok else "MISMATCH against torch")
    return ok


def _verdict(ok: bool) -> str:
    return "ok" if ok else "WRONG"
