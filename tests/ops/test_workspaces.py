"""Cached workspaces: a full heap evicts them (collectively) instead of failing the op."""

from __future__ import annotations

import pytest
import torch
import torch.distributed as dist

import ditron
from ditron.ops import workspaces
from ditron.runtime.heap import ALIGNMENT, HeapExhausted
from ditron.runtime.signals import retired_pads
from ditron.runtime.world import current


def _reference_sum(x: torch.Tensor) -> torch.Tensor:
    y = x.detach().cpu().clone()
    dist.all_reduce(y, group=current().host_group)
    return y


def _rank_many_shapes() -> tuple[int, int]:
    """With a heap that holds only a few workspaces, ops over many sizes keep working (older
    workspaces are evicted), results stay exact, and an op that needs more than the whole
    heap still fails with the heap's error on every rank."""
    me = ditron.world().rank
    dev = ditron.world().device
    heap = current().heap
    peak = 0
    for i, n in enumerate([20_000, 30_000, 50_000, 70_000, 20_000, 90_000]):
        g = torch.Generator().manual_seed(100 * me + i)
        x = torch.randn(n, generator=g).to(dev)
        for engine in ("sm", "copy_engine"):
            ref = _reference_sum(x)
            y = ditron.ops.all_reduce(x, "one_shot", engine=engine)
            torch.testing.assert_close(y.cpu(), ref, rtol=1e-5, atol=1e-5,
                                       msg=f"size {n} {engine}")
        peak = max(peak, heap.used_bytes)
    assert peak <= heap.size
    too_big = torch.zeros(heap.size // 4 + 1, device=dev)  # one-shot inbox: 2 x W x n x 4 B
    with pytest.raises(HeapExhausted, match="symmetric heap exhausted"):
        ditron.ops.all_reduce(too_big, "one_shot", engine="copy_engine")
    # the heap is still usable afterwards
    x = torch.ones(1000, device=dev)
    assert torch.equal(ditron.ops.all_reduce(x, "one_shot", engine="sm").cpu(),
                       torch.full((1000,), float(ditron.world().world_size)))
    return workspaces.evictions(), int(peak > 0)


@pytest.mark.parametrize("world_size", [2, 3])
def test_full_heap_evicts_cached_workspaces(world_size, monkeypatch):
    monkeypatch.setenv("DITRON_HEAP_SIZE", "6M")
    results = ditron.launch(_rank_many_shapes, world_size)
    assert len({r for r in results}) == 1, results  # every rank evicted at the same calls
    assert results[0][0] >= 1, "no eviction happened: the heap was not small enough"


def _rank_retired_pads_make_room() -> tuple[int, int]:
    """A full heap holding no workspace but outgrown signal pads frees those and tries again
    (it used to fail at once: nothing to evict)."""
    ditron.barrier()  # its pad first (at the heap's top)
    for slots in (1000, 2000, 4000):  # the last two replace the one before: 24320 bytes
        ditron.signal_pad("test.filler", slots)  # retired, 8960 free at the end
    bufs = workspaces.cached(("test", "room"), lambda: workspaces.alloc_buffers(
        [((20_000,), torch.uint8, "test:room")]))
    return current().heap.offset_of(bufs.tensors[0]), workspaces.evictions()


@pytest.mark.parametrize("world_size", [1, 2])
def test_full_heap_frees_retired_signal_pads(world_size, monkeypatch):
    monkeypatch.setenv("DITRON_HEAP_SIZE", "64K")
    results = ditron.launch(_rank_retired_pads_make_room, world_size)
    assert len(set(results)) == 1 and results[0][1] == 1, results


def _rank_drop_frees_the_pad() -> bool:
    """``workspaces.drop`` frees a workspace's signal pad (``pad_key``) with its buffers,
    as ``release_workspaces`` does. It freed the buffers only: the workspace built again
    under the key found the old pad, its signals at the old calls' epochs while its users
    restart theirs from 0 (a fresh workspace's device epochs), so every wait passed."""
    from ditron.runtime.signals import signal_pad

    ditron.barrier()  # its pad first: the heap's use is compared below
    heap = current().heap
    used = heap.used_bytes

    def build() -> workspaces.Buffers:
        bufs = workspaces.alloc_buffers([((8,), torch.float32, "test:drop")],
                                        pad_key="test.drop")
        signal_pad("test.drop", 4)
        return bufs

    workspaces.cached(("test", "drop"), build)
    pad = signal_pad("test.drop", 4)
    pad.signals.fill_(pad.next_epoch(5))  # five calls made
    ditron.barrier()
    workspaces.drop(("test", "drop"))
    assert heap.used_bytes == used
    with pytest.raises(ValueError, match="not inside one live symmetric buffer"):
        ditron.peer(pad.signals, 0)
    workspaces.cached(("test", "drop"), build)
    fresh = signal_pad("test.drop", 4)
    assert fresh is not pad and fresh.epoch == 0 and fresh.signals.tolist() == [0] * 4
    workspaces.drop(("test", "drop"))
    return heap.used_bytes == used


@pytest.mark.parametrize("world_size", [1, 2])
def test_drop_frees_the_workspace_pad(world_size):
    assert all(ditron.launch(_rank_drop_frees_the_pad, world_size))


def _gather_reference(x: torch.Tensor) -> torch.Tensor:
    parts = [torch.empty_like(x) for _ in range(ditron.world().world_size)]
    dist.all_gather(parts, x.detach().cpu().contiguous(), group=current().host_group)
    return torch.cat(parts)


def _rank_growing_gemms() -> tuple[int, int]:
    """GEMM-RS over ever wider ``N`` and AG-GEMM over ever more chunks on a 64K heap: each
    call outgrows the op's signal pad. The replaced pads used to stay where they were
    (between the workspaces, which the full heap evicts) until no workspace fit although
    the heap was almost empty (N = 256: 32768 bytes asked, 1792 used of 65536, largest free
    block 24576, also after ``release_workspaces``). Results stay exact; after
    ``release_workspaces`` only the current pads are left."""
    from ditron.ops.collectives import release_workspaces

    w = ditron.world()
    W, me = w.world_size, w.rank
    rt = current()
    for i, n in enumerate([64, 128, 192, 256, 320, 384]):
        g = torch.Generator().manual_seed(10 * me + i)
        a = torch.randn(W * 8, 8, generator=g)
        b = torch.randn(8, n, generator=g)
        ref = _reference_sum(a @ b)[me * 8:(me + 1) * 8]
        got = ditron.ops.gemm_rs(a.to(w.device), b.to(w.device), method="overlap")
        torch.testing.assert_close(got.cpu(), ref, rtol=1e-4, atol=1e-4, msg=f"gemm_rs N={n}")
        a = torch.randn(4 * (i + 1), 8, generator=g)  # one chunk per row: the pad grows
        b = torch.randn(8, 16, generator=torch.Generator().manual_seed(i))
        got = ditron.ops.ag_gemm(a.to(w.device), b.to(w.device), method="overlap",
                                 engine="copy_engine", chunk_rows=1)
        torch.testing.assert_close(got.cpu(), _gather_reference(a) @ b, rtol=1e-4, atol=1e-4,
                                   msg=f"ag_gemm m={4 * (i + 1)}")
    replaced = retired_pads()
    release_workspaces()
    assert retired_pads() == 0
    pads = [v.signals for k, v in rt.cache.items() if isinstance(k, tuple) and k[0] ==
            "signal_pad"] + [rt.cache["barrier_pad"].signals]
    assert rt.heap.used_bytes == sum(-(-t.nbytes // ALIGNMENT) * ALIGNMENT for t in pads)
    return workspaces.evictions(), replaced


def test_outgrown_signal_pads_do_not_fragment_the_heap(monkeypatch):
    monkeypatch.setenv("DITRON_HEAP_SIZE", "64K")
    results = ditron.launch(_rank_growing_gemms, 2)
    assert results[0] == results[1], results
    assert results[0][0] >= 1, "no eviction happened: the heap was not small enough"


def _rank_pad_after_full_heap() -> tuple[int, int]:
    """GEMM-RS whose receive buffer takes the heap's last free bytes, so its (grown) signal
    pad, fetched after the buffer, finds no room: the op frees every cached workspace and
    fetches both again (it raised HeapExhausted, the same at every later call, since the
    buffer stayed cached)."""
    w = ditron.world()
    W, me = w.world_size, w.rank
    heap = current().heap
    M, k = 32 * W, 8

    def check(n: int, i: int) -> None:
        g = torch.Generator().manual_seed(10 * me + i)
        a, b = torch.randn(M, k, generator=g), torch.randn(k, n, generator=g)
        ref = _reference_sum(a @ b)[me * 32:(me + 1) * 32]
        got = ditron.ops.gemm_rs(a.to(w.device), b.to(w.device), method="overlap",
                                 engine="colocated")
        torch.testing.assert_close(got.cpu(), ref, rtol=1e-4, atol=1e-4, msg=f"N={n}")

    check(8, 0)
    per_col = 2 * W * 32 * 4  # the receive buffer's bytes per column of N (fp32)
    n = (heap.size - heap.used_bytes) // per_col
    assert heap.size - heap.used_bytes - n * per_col < ALIGNMENT, "the pad would still fit"
    before = workspaces.evictions()
    for i in range(3):  # the first call evicts; the later ones reuse what it fetched
        check(n, i + 1)
    return workspaces.evictions() - before, n


def _one_free_block() -> list[torch.Tensor]:
    """Free every workspace, then fill the holes between the pads at the heap's top (freed
    pads) from the top down, so that an op's buffer and its pad compete for the one low
    block; returns the fillers, to free afterwards."""
    from ditron.ops.collectives import release_workspaces

    release_workspaces()
    heap = current().heap
    return [heap.alloc((size,), torch.uint8, from_top=True)
            for _, size in reversed(heap._free[1:])]


def _rank_ag_pad_after_full_heap() -> tuple[int, int]:
    """The same for AG-GEMM's pushed variant, whose pad grows with the chunk count."""
    fillers = _one_free_block()
    w = ditron.world()
    W, me = w.world_size, w.rank
    heap = current().heap

    def check(m: int, kk: int, i: int) -> None:
        g = torch.Generator().manual_seed(10 * me + i)
        a = torch.randn(m, kk, generator=g)
        b = torch.randn(kk, 8, generator=torch.Generator().manual_seed(i))
        got = ditron.ops.ag_gemm(a.to(w.device), b.to(w.device), method="overlap",
                                 engine="copy_engine", chunk_rows=1)
        torch.testing.assert_close(got.cpu(), _gather_reference(a) @ b, rtol=1e-4, atol=1e-4,
                                   msg=f"m={m} K={kk}")

    check(4, 8, 0)
    m = 16  # one chunk per row: W * 16 chunks, the pad grows past the first call's
    per_k = 2 * W * m * 4  # the gathered buffer's bytes per column of K (two halves, fp32)
    kk = (heap.size - heap.used_bytes) // per_k
    assert heap.size - heap.used_bytes - kk * per_k < ALIGNMENT, "the pad would still fit"
    before = workspaces.evictions()
    for i in range(3):
        check(m, kk, i + 1)
    for t in fillers:
        ditron.free(t)
    return workspaces.evictions() - before, kk


def _rank_ag_pulled_pad_after_full_heap() -> tuple[int, int]:
    """The same for AG-GEMM's colocated variant (peers' shards loaded by the GEMM), whose pad
    is fetched once, at its first call: it was fetched outside the eviction, so a first
    call whose buffer took the heap's last free bytes raised HeapExhausted."""
    fillers = _one_free_block()
    w = ditron.world()
    W, me = w.world_size, w.rank
    heap = current().heap
    # an evictable workspace: a GEMM-RS call's
    a = torch.randn(W * 8, 8, generator=torch.Generator().manual_seed(me))
    b = torch.randn(8, 8, generator=torch.Generator().manual_seed(0))
    ditron.ops.gemm_rs(a.to(w.device), b.to(w.device), method="overlap", engine="colocated")
    m = 16
    per_k = 2 * m * 4  # the own shard's buffer per column of K (two halves, fp32)
    kk = (heap.size - heap.used_bytes) // per_k
    assert heap.size - heap.used_bytes - kk * per_k < ALIGNMENT, "the pad would still fit"
    before = workspaces.evictions()
    for i in range(3):  # the first call evicts; the later ones reuse what it fetched
        g = torch.Generator().manual_seed(10 * me + i)
        a = torch.randn(m, kk, generator=g)
        b = torch.randn(kk, 8, generator=torch.Generator().manual_seed(i))
        got = ditron.ops.ag_gemm(a.to(w.device), b.to(w.device), method="overlap",
                                 engine="colocated")
        torch.testing.assert_close(got.cpu(), _gather_reference(a) @ b, rtol=1e-4, atol=1e-4,
                                   msg=f"call {i}")
    for t in fillers:
        ditron.free(t)
    return workspaces.evictions() - before, kk


def _rank_pads_after_full_heap() -> list[tuple[int, int]]:
    return [_rank_pad_after_full_heap(), _rank_ag_pad_after_full_heap(),
            _rank_ag_pulled_pad_after_full_heap()]


def test_a_pad_that_finds_the_heap_full_evicts_the_workspaces(monkeypatch):
    monkeypatch.setenv("DITRON_HEAP_SIZE", "64K")
    results = ditron.launch(_rank_pads_after_full_heap, 2)
    assert results[0] == results[1], results
    assert [evicted for evicted, _ in results[0]] == [1, 1, 1], results
