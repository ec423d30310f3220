from __future__ import annotations

import pytest
import torch

import ditron
from ditron.runtime.world import current


def _symmetric_buffers() -> bool:
    w = ditron.world()
    a = ditron.empty((5, 7), torch.float32, name="a")
    b = ditron.zeros(33, torch.bfloat16, name="b")
    c = ditron.empty((0,), torch.int64)
    assert a.shape == (5, 7) and a.dtype == torch.float32 and a.device == w.device
    assert b.shape == (33,) and bool((b == 0).all())
    assert c.numel() == 0
    gen = torch.Generator().manual_seed(7)
    data = torch.randn(w.world_size, 5, 7, generator=gen)  # same draw on every rank
    a.copy_(data[w.rank].to(w.device))
    ditron.barrier()
    for r in range(w.world_size):
        assert torch.equal(ditron.peer(a, r).cpu(), data[r])
        assert torch.equal(ditron.peer(a[1:, 2], r).cpu(), data[r][1:, 2])  # views translate too
    ditron.barrier()
    right = (w.rank + 1) % w.world_size
    ditron.peer(b, right).fill_(w.rank + 1)  # write into the neighbour's copy
    ditron.barrier()
    left = (w.rank - 1) % w.world_size
    assert bool((b.float().cpu() == left + 1).all())
    return ditron.is_symmetric(a) and not ditron.is_symmetric(torch.empty(3, device=w.device))


@pytest.mark.parametrize("world_size", [1, 2, 3, 4])
def test_symmetric_allocation_and_peer_views(backend, world_size):
    assert all(ditron.launch(_symmetric_buffers, world_size, backend=backend))


def _mismatched_shapes():
    w = ditron.world()
    ditron.empty((4, 4 + (w.rank == 1)), torch.float32)


def test_mismatched_shapes_raise_naming_ranks(backend):
    with pytest.raises(ValueError, match=r"(?s)ranks disagree.*rank 0: shape=\(4, 4\).*"
                                         r"rank 1: shape=\(4, 5\)"):
        ditron.launch(_mismatched_shapes, 3, backend=backend)


def _exhaust():
    ditron.empty((512, 1024), torch.uint8)  # half of the 1 MiB heap
    ditron.empty((600, 1024), torch.uint8)


def test_heap_exhaustion_reports_used_and_free(backend, monkeypatch):
    monkeypatch.setenv("DITRON_HEAP_SIZE", "1M")
    with pytest.raises(RuntimeError, match=r"heap exhausted on rank \d: requested 614400 bytes, "
                                           r"used \d+ of 1048576 bytes \(free \d+"):
        ditron.launch(_exhaust, 2, backend=backend)


def _free_and_reuse() -> bool:
    a = ditron.empty((1000,), torch.float32)
    b = ditron.empty((10,), torch.float32)
    where = a.data_ptr()
    ditron.free(a)
    c = ditron.empty((900,), torch.float32)  # first fit: lands where ``a`` was
    with pytest.raises(ValueError, match="not the start of a live symmetric buffer"):
        ditron.free(b[1:])
    with pytest.raises(ValueError, match="not in the symmetric heap"):
        ditron.peer(torch.zeros(3), 0)
    with pytest.raises(ValueError, match="outside"):
        ditron.peer(b, 99)
    for bad in (0.5, True, "1"):  # 0.5 passed the range check and failed indexing a list
        with pytest.raises(TypeError, match=f"ditron.peer: rank must be an int, got {bad!r}"):
            ditron.peer(b, bad)
    other = 1 - ditron.world().rank
    tail = ditron.peer(c[800:], other)  # a view of a live buffer, asked for before the free
    ditron.free(c)
    for freed in (c, c[800:]):  # its views too, though one was made while it lived
        with pytest.raises(ValueError, match=r"ditron.peer: the tensor spans heap bytes "
                                             r"\[\d+, \d+\), which are not inside one live"):
            ditron.peer(freed, other)
    d = ditron.empty((900,), torch.float32)  # the same block again: its views are fine
    assert ditron.peer(d[800:], other).data_ptr() == tail.data_ptr()
    for bad in ((2.5, 4), ("3",)):
        with pytest.raises(TypeError, match="shape must be an int or a sequence of ints"):
            ditron.empty(bad, torch.float32)
    return c.data_ptr() == where == d.data_ptr()


def test_free_and_reuse(backend):
    assert all(ditron.launch(_free_and_reuse, 2, backend=backend))


def _zero_size_buffers() -> int:
    w = ditron.world()
    heap = current().heap
    used = heap.used_bytes
    for shape in (0, (0, 4), (3, 0)):
        for make in (ditron.empty, ditron.zeros):
            t = make(shape, torch.float32)
            assert t.numel() == 0 and ditron.is_symmetric(t)  # data_ptr() is 0: was refused
            for r in range(w.world_size):
                view = ditron.peer(t, r)
                assert view.shape == t.shape and view.dtype == t.dtype and view.numel() == 0
            with pytest.raises(ValueError, match="not in the symmetric heap"):  # not cached
                ditron.peer(torch.empty(shape, device=w.device), 0)  # as t's views
            ditron.free(t)
            with pytest.raises(ValueError, match="not the start of a live symmetric buffer"):
                ditron.free(t)  # freed twice
    for _ in range(100):
        ditron.free(ditron.empty(0))
    a, z, b = ditron.empty(4), ditron.empty((0, 2)), ditron.empty(4)  # a block of its own
    assert heap.offset_of(a) < heap.offset_of(z) < heap.offset_of(b)
    for t in (a, z, b):
        ditron.free(t)
    if w.world_size > 1:  # shapes of empty buffers are agreed on too
        with pytest.raises(ValueError, match=r"(?s)ranks disagree.*shape=\(0, 1\)"):
            ditron.empty((0, 1 + (w.rank == 1)))
    return heap.used_bytes - used


@pytest.mark.parametrize("world_size", [1, 2, 3])
def test_zero_size_buffers_are_symmetric_and_freed(backend, world_size):
    assert ditron.launch(_zero_size_buffers, world_size, backend=backend) == [0] * world_size


def _free_whole_buffers_only() -> bool:
    used = current().heap.used_bytes
    t = ditron.empty(8, torch.float32, name="t")
    for part in (t[:4], t[:0], t[::2], t[:1].expand(8), t.view(torch.int16)[:8]):
        with pytest.raises(ValueError, match=r"ditron.free: the tensor \(shape .*\) is not "
                                             r"all of the symmetric buffer 't' \(shape \(8,\), "
                                             r"torch.float32, 32 bytes\)"):
            ditron.free(part)
    ditron.peer(t, 0)  # still live
    ditron.free(t.view(2, 4).T)  # all of its bytes: a view of the whole buffer
    u = ditron.empty((2, 3), torch.bfloat16)
    ditron.free(u.view(torch.uint8))
    return current().heap.used_bytes == used


@pytest.mark.parametrize("world_size", [1, 2])
def test_free_refuses_part_of_a_buffer(backend, world_size):
    assert all(ditron.launch(_free_whole_buffers_only, world_size, backend=backend))


def _other_node_peer():
    w = ditron.world()
    t = ditron.zeros((4,), torch.float32)
    ditron.barrier()
    other = (w.rank + w.local_world_size) % w.world_size
    with pytest.raises(ValueError, match="on another node"):
        ditron.peer(t, other)
    same = w.node * w.local_world_size + (w.local_rank + 1) % w.local_world_size
    ditron.peer(t, same).fill_(1.0)
    ditron.barrier()
    return (w.node, w.num_nodes, float(t.sum()))


def test_simulated_nodes(monkeypatch):
    monkeypatch.setenv("DITRON_LOCAL_WORLD_SIZE", "2")
    assert ditron.launch(_other_node_peer, 4, backend="cpu") == [
        (0, 2, 4.0), (0, 2, 4.0), (1, 2, 4.0), (1, 2, 4.0)]


def _poisoned() -> bool:
    t = ditron.empty((8,), torch.float32)
    i = ditron.empty((8,), torch.int32)
    return bool(torch.isnan(t).all()) and bool((i == -1).all())


def test_poison_fresh_memory(backend, monkeypatch):
    monkeypatch.setenv("DITRON_POISON", "1")
    assert all(ditron.launch(_poisoned, 2, backend=backend))


def test_api_needs_init():
    with pytest.raises(RuntimeError, match="not initialised"):
        ditron.empty((3,), torch.float32)
