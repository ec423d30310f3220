"""Agreement on what ranks allocate and agree on, beyond shapes: a symmetric buffer's name
(compared across ranks like its shape and dtype), and unhashable agreed fields refused
alike at every world size (a world of one rank gathers nothing)."""

from __future__ import annotations

import pytest
import torch

import ditron
from ditron.runtime.agreement import agree
from ditron.runtime.world import current


def _named_buffers_move_data() -> bool:
    """Same names (and one unnamed buffer) on every rank: each rank writes fresh random rows
    into its right neighbour's poisoned copies through ``peer``; the rows read back equal
    the ones drawn."""
    w = ditron.world()
    gen = torch.Generator()
    gen.seed()  # fresh, and different on each rank
    a = ditron.empty((3, 5), torch.float32, name="test.names.a")
    b = ditron.empty((7,), torch.float64)  # unnamed on every rank: fine
    a.fill_(float("nan"))
    b.fill_(float("nan"))
    data_a = torch.randn(3, 5, generator=gen)
    data_b = torch.randn(7, generator=gen, dtype=torch.float64)
    ditron.barrier()
    right = (w.rank + 1) % w.world_size
    ditron.peer(a, right).copy_(data_a.to(w.device))
    ditron.peer(b, right).copy_(data_b.to(w.device))
    ditron.barrier()
    left = (w.rank - 1) % w.world_size
    got = (a.cpu(), b.cpu())
    # what the left neighbour drew: every rank sends its draw to all (host reference)
    sent = [None] * w.world_size
    torch.distributed.all_gather_object(sent, (data_a, data_b), group=current().host_group)
    ditron.barrier()
    ditron.free(b)
    ditron.free(a)
    return torch.equal(got[0], sent[left][0]) and torch.equal(got[1], sent[left][1])


@pytest.mark.parametrize("world_size", [1, 2, 3])
def test_equal_names_on_every_rank_allocate(backend, world_size):
    assert all(ditron.launch(_named_buffers_move_data, world_size, backend=backend))


def _names_differ(odd: str | None) -> tuple[str, int, int]:
    """Rank 1 allocates under ``odd``, the others under ``"ring.send"``, at the same point
    and with the same shape; then every rank allocates alike (the heap must be as before)."""
    w = ditron.world()
    heap = current().heap
    before = heap.used_bytes
    name = odd if w.rank == 1 else "ring.send"
    with pytest.raises(ValueError) as info:
        ditron.empty((4,), torch.float32, name=name)
    after = heap.used_bytes
    t = ditron.empty((4,), torch.float32, name="ring.recv")
    offset = heap.offset_of(t)
    ditron.free(t)
    return str(info.value), after - before, offset


@pytest.mark.parametrize("world_size", [2, 3])
@pytest.mark.parametrize("odd", ["ring.recv", None])
def test_different_names_raise_on_every_rank(backend, world_size, odd):
    """Ranks allocating under different names (or one unnamed) were out of step unnoticed
    where the shapes matched: a peer's writes into its ``ring.send`` landed in this rank's
    ``ring.recv``. Every rank now raises, naming each rank's name, and keeps no block."""
    res = ditron.launch(_names_differ, world_size, odd, backend=backend)
    for message, kept, offset in res:
        assert "ranks disagree on the call (name differs)" in message, message
        assert "rank 0: shape=(4,), dtype='torch.float32', heap_offset=0, name='ring.send'" \
            in message, message
        assert f"rank 1: shape=(4,), dtype='torch.float32', heap_offset=0, name={odd!r}" \
            in message, message
        assert kept == 0 and offset == 0  # nothing handed out: the next buffer takes its place


def _pad_keys_differ() -> str:
    """Signal pads found by key: ranks asking for different keys at the same point."""
    with pytest.raises(ValueError) as info:
        ditron.signal_pad(f"test.pad{ditron.world().rank}", 2)  # a caller's bug
    return str(info.value)


def test_signal_pads_under_different_keys_raise(backend):
    for message in ditron.launch(_pad_keys_differ, 3, backend=backend):
        assert "name differs" in message and "name='signals:test.pad2'" in message, message


def _bad_name_on_rank_0() -> str:
    with pytest.raises((TypeError, ValueError)) as info:
        ditron.empty((4,), torch.float32, name=7 if ditron.world().rank == 0 else "x")
    return f"{type(info.value).__name__}: {info.value}"


@pytest.mark.parametrize("world_size", [1, 2])
def test_a_name_that_is_not_a_str_is_refused_on_every_rank(backend, world_size):
    for rank, message in enumerate(ditron.launch(_bad_name_on_rank_0, world_size,
                                                 backend=backend)):
        if rank == 0:
            assert message == "TypeError: name must be a str or None, got 7", message
        else:  # told in the allocation's gather
            assert message.startswith("ValueError: ") and (
                "rank 0: TypeError: name must be a str or None, got 7" in message), message


def _unhashable_field() -> list[str]:
    """An agreed call with a list field (unhashable); the same with ``remember=False`` and
    with a tuple pass."""
    with pytest.raises(TypeError) as info:
        agree("test.unhashable", splits=[1, 2], n=3)
    agree("test.unhashable", remember=False, splits=[1, 2], n=3)
    agree("test.unhashable", splits=(1, 2), n=3)
    return [str(info.value)]


@pytest.mark.parametrize("world_size", [1, 2, 3])
def test_unhashable_fields_raise_at_every_world_size(backend, world_size):
    """A world of one rank returned before hashing: code tested at one rank failed only
    once scaled out."""
    for (message,) in ditron.launch(_unhashable_field, world_size, backend=backend):
        assert message == ("test.unhashable: the fields of an agreed call must be hashable "
                           "(remember=False gathers them on every call): unhashable type: "
                           "'list'"), message
