"""The lifecycle of :func:`ditron.ops.all_to_all_inbox`'s ``Inbox``: open across
``release_workspaces`` (explicit and on a full heap), open on one rank only, closed twice,
closed under another world, closed after ``ditron.shutdown()``."""

from __future__ import annotations

import pytest
import torch
import torch.distributed as dist

import ditron
from ditron.ops import workspaces
from ditron.runtime.world import current

#: elements of a row: 256 bytes in fp32
ROW = 64


def _rows(me: int, it: int, w: int, least: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """Fresh random rows and splits (``least`` to 3 rows to each rank) of call ``it``."""
    g = torch.Generator().manual_seed(1000 * it + me)
    splits = torch.randint(least, 4, (w,), generator=g)
    return torch.randn(int(splits.sum()) + 1, ROW, generator=g), splits


def _reference(x: torch.Tensor, splits: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``(out_splits, rows)`` of ``dist.all_to_all_single`` in the current world."""
    host = current().host_group
    outs = torch.empty_like(splits)
    dist.all_to_all_single(outs, splits, group=host)
    ref = torch.empty(int(outs.sum()), *x.shape[1:], dtype=x.dtype)
    dist.all_to_all_single(ref, x[: int(splits.sum())], outs.tolist(), splits.tolist(),
                           group=host)
    return outs, ref


def _peer_rows(inbox, outs: torch.Tensor, ref: torch.Tensor, what: str) -> None:
    """The inbox holds the reference rows of every peer where the docstring says."""
    me = ditron.world().rank
    assert torch.equal(inbox.splits.cpu(), outs), (what, inbox.splits, outs)
    first = int(inbox.first)
    peer = torch.repeat_interleave(torch.arange(len(outs)), outs) != me
    got = inbox.rows.cpu()[first:first + len(ref)][peer]
    assert torch.equal(got, ref[peer]), f"{what}: the inbox's rows differ"


def _calls(cap: int, it0: int, n: int) -> int:
    """``n`` all_to_all_device calls of one signature against the reference."""
    w, me, dev = ditron.world().world_size, ditron.world().rank, ditron.world().device
    for it in range(it0, it0 + n):
        x, splits = _rows(me, it, w)
        outs, ref = _reference(x, splits)
        out, out_splits = ditron.ops.all_to_all_device(x.to(dev), splits.to(dev), cap)
        assert torch.equal(out_splits.cpu(), outs), (it, out_splits, outs)
        assert torch.equal(out[: len(ref)].cpu(), ref), f"call {it}: rows differ"
    return n


def check_release_keeps_open_inbox() -> int:
    """``release_workspaces()`` with an Inbox open: the inbox's workspace stays (its rows
    and pad are not handed to new buffers, which its close() would otherwise write an
    acknowledgement into), another workspace goes; the calls after it go on."""
    w, me, dev = ditron.world().world_size, ditron.world().rank, ditron.world().device
    heap = current().heap
    cap = 4 * w
    one = torch.ones(w, dtype=torch.int64, device=dev)
    ditron.ops.all_to_all_device(torch.zeros(w, 3, device=dev), one, w)  # another workspace
    x, splits = _rows(me, 0, w)
    outs, ref = _reference(x, splits)
    inbox = ditron.ops.all_to_all_inbox(x.to(dev), splits.to(dev), cap)
    frees = heap.frees
    workspaces.release_workspaces()
    assert heap.frees > frees, "the closed workspace was not freed"
    # new buffers where the freed ones were: bottom up (rows) and top down (signal pads)
    low = ditron.zeros((2 * cap * ROW + 2 * w * w,), torch.float32)
    high = heap.alloc((64,), torch.int64, "test:high", from_top=True)
    high.zero_()
    low.fill_(-7.0)
    ditron.barrier()
    _peer_rows(inbox, outs, ref, "after release_workspaces")
    inbox.close()
    ditron.barrier()
    assert not high.count_nonzero(), "close() wrote into a buffer allocated after the release"
    assert torch.equal(low.cpu(), torch.full_like(low.cpu(), -7.0)), "a new buffer changed"
    heap.free(high)
    return _calls(cap, 1, 3)


@pytest.mark.parametrize("world_size", [2, 3])
def test_release_workspaces_keeps_an_open_inbox(world_size, backend):
    """It freed the open inbox's workspace and dropped its pad; the inbox's close() then
    wrote the ack into a pad-sized buffer allocated after the release ([1, 1])."""
    assert ditron.launch(check_release_keeps_open_inbox, world_size,
                         backend=backend) == [3] * world_size


def check_full_heap_keeps_open_inbox() -> tuple[int, int]:
    """An op finding the heap full while an Inbox is open evicts the other workspaces only:
    its new inbox does not land on the open one's rows, which stay as received."""
    w, me, dev = ditron.world().world_size, ditron.world().rank, ditron.world().device
    cap = 4 * w
    x, splits = _rows(me, 0, w, least=1)
    _calls(cap, 5, 1)  # the inbox's workspace first, at the bottom of the heap
    big = torch.zeros(1, ROW, device=dev)
    one = torch.ones(w, dtype=torch.int64, device=dev)
    ditron.ops.all_to_all_device(big, one, 1100)  # 2 x 1100 rows of 256 B: 550 KB
    outs, ref = _reference(x, splits)
    with ditron.ops.all_to_all_inbox(x.to(dev), splits.to(dev), cap) as inbox:
        # another 550 KB inbox does not fit beside the first: the heap is full, workspaces go
        # (two calls: the second fills the first half of the new inbox, 2 * cap rows from
        # every peer: the old inbox's rows from rank 0 on rank 1, say, were overwritten)
        for it in (1, 2):
            y = torch.randn(2 * cap * w, ROW, generator=torch.Generator().manual_seed(it + me))
            ysplits = torch.full((w,), 2 * cap)
            youts, yref = _reference(y, ysplits)
            out, out_splits = ditron.ops.all_to_all_device(y.to(dev), ysplits.to(dev), 1000)
            assert torch.equal(out[: len(yref)].cpu(), yref)
            assert torch.equal(out_splits.cpu(), youts)
        _peer_rows(inbox, outs, ref, "after an eviction")
    return workspaces.evictions(), _calls(cap, 3, 2)


def test_a_full_heap_keeps_an_open_inbox(monkeypatch, backend):
    """The eviction freed the open inbox's workspace and the new 1000-row inbox took its
    place: the open inbox's rows were overwritten before its consumer read them."""
    monkeypatch.setenv("DITRON_HEAP_SIZE", "1M")
    assert ditron.launch(check_full_heap_keeps_open_inbox, 2, backend=backend) == [(1, 2)] * 2


def check_open_on_some_ranks(open_on: tuple[int, ...]) -> list[str]:
    """Ranks in ``open_on`` leave their Inbox open, the others close theirs; the next call
    of the signature raises on every rank (no rank waits for another in the exchange);
    once closed everywhere, the calls go on."""
    w, me, dev = ditron.world().world_size, ditron.world().rank, ditron.world().device
    cap = 4 * w
    x, splits = _rows(me, 0, w)
    inbox = ditron.ops.all_to_all_inbox(x.to(dev), splits.to(dev), cap)
    if me not in open_on:
        inbox.close()
    errors = []
    for call in (ditron.ops.all_to_all_device, ditron.ops.all_to_all_inbox):
        with pytest.raises((RuntimeError, ValueError), match="is still open") as info:
            call(x.to(dev), splits.to(dev), cap)
        errors.append(type(info.value).__name__)
    inbox.close()
    _calls(cap, 1, 3)
    return errors


@pytest.mark.parametrize("world_size,open_on", [(2, (0,)), (3, (1,)), (3, (0, 1, 2))])
def test_an_open_inbox_on_one_rank_raises_on_every_rank(world_size, open_on, monkeypatch,
                                                        backend):
    """Only the rank holding the inbox open raised; its peers went into the exchange and
    waited for it until the wait timeout (``WaitTimeoutError``, or a hang without one)."""
    monkeypatch.setenv("DITRON_WAIT_TIMEOUT", "20")
    got = ditron.launch(check_open_on_some_ranks, world_size, open_on, backend=backend)
    for rank, errors in enumerate(got):  # the holder its own error, the others naming it
        assert errors == ["RuntimeError" if rank in open_on else "ValueError"] * 2, got


def check_stale_close() -> int:
    """A second close() of an Inbox, after a newer one of its signature opened, leaves the
    newer one open (it acked the newer inbox: the peers could overwrite its half while it
    was read)."""
    w, me, dev = ditron.world().world_size, ditron.world().rank, ditron.world().device
    cap = 4 * w
    x, splits = _rows(me, 0, w)
    older = ditron.ops.all_to_all_inbox(x.to(dev), splits.to(dev), cap)
    older.close()
    y, ysplits = _rows(me, 1, w)
    outs, ref = _reference(y, ysplits)
    newer = ditron.ops.all_to_all_inbox(y.to(dev), ysplits.to(dev), cap)
    older.close()
    with pytest.raises(RuntimeError, match="is still open"):
        ditron.ops.all_to_all_device(y.to(dev), ysplits.to(dev), cap)
    _peer_rows(newer, outs, ref, "the newer inbox")
    newer.close()
    return _calls(cap, 2, 3)


def test_a_second_close_leaves_a_newer_inbox_open(backend):
    assert ditron.launch(check_stale_close, 2, backend=backend) == [3, 3]


def check_close_in_another_world() -> int:
    """Inboxes of the job's world closed while a world over fewer ranks is current ack the
    job's ranks (they acked the current world's node ranks with the job's context: rank 2
    never got ranks 0 and 1's acks and, two inboxes later, waited for them)."""
    me, dev = ditron.world().rank, ditron.world().device
    job = ditron.world()
    w = job.world_size
    cap = 4 * w
    sub = ditron.init(group=[0, 1] if me < 2 else [2])
    for it in range(3):
        with ditron.use(job):
            x, splits = _rows(me, it, w)
            outs, ref = _reference(x, splits)
            inbox = ditron.ops.all_to_all_inbox(x.to(dev), splits.to(dev), cap)
            _peer_rows(inbox, outs, ref, f"inbox {it}")
        assert ditron.world() == sub
        inbox.close()
    with ditron.use(job):
        return _calls(cap, 3, 2)


def test_an_inbox_closes_in_its_own_world(monkeypatch, backend):
    monkeypatch.setenv("DITRON_WAIT_TIMEOUT", "20")
    assert ditron.launch(check_close_in_another_world, 3, backend=backend) == [2] * 3


def check_close_after_shutdown() -> bool:
    """close() after ``ditron.shutdown()`` (its heap unmapped) does nothing (it raised "not
    initialised" from the ack, or wrote into the heap of a world made since)."""
    w, me, dev = ditron.world().world_size, ditron.world().rank, ditron.world().device
    x, splits = _rows(me, 0, w)
    inbox = ditron.ops.all_to_all_inbox(x.to(dev), splits.to(dev), 4 * w)
    ditron.shutdown()
    inbox.close()
    inbox.close()
    return not ditron.is_initialized()


def test_close_after_shutdown_does_nothing(backend):
    assert ditron.launch(check_close_after_shutdown, 2, backend=backend) == [True, True]
