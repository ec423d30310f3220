"""Transfer engines moved directly: push, pull, sum-while-moving, signals, repeated use."""

from __future__ import annotations

import pytest
import torch

import ditron
from ditron.engines import Signal, Transfer, get_engine
from ditron.engines.sync import wait_slots

DTYPES = (torch.float32, torch.bfloat16, torch.float16)


def _data(rank: int, it: int, n: int, dtype: torch.dtype) -> torch.Tensor:
    """Rank ``rank``'s fresh random payload of iteration ``it`` (any rank can recompute it)."""
    g = torch.Generator().manual_seed(1000 * it + rank)
    return torch.randn(n, generator=g).to(dtype)


def check_engine(name: str, options: dict, n: int, calls: int = 3) -> int:
    """Push to every node peer, pull from every node peer, and ring-reduce, ``calls`` times."""
    w = ditron.world()
    me, size = w.rank, w.world_size
    dev = w.device
    engine = get_engine(name, **options)
    self_ok = name in ("sm", "tma")  # engines that also copy rank-local transfers
    node = range(me // w.local_world_size * w.local_world_size,
                 min((me // w.local_world_size + 1) * w.local_world_size, size))
    pad = ditron.signal_pad(f"test_engine:{name}", 3 * size)
    checks = 0
    for it in range(calls):
        dtype = DTYPES[it % 3]
        inbox = ditron.empty((size, n), dtype)
        inbox.fill_(float("nan"))
        ditron.barrier()
        mine = _data(me, it, n, dtype).to(dev)
        # push: my payload into every node peer's inbox row ``me``, raising its slot ``me``
        epoch = pad.next_epoch()
        pushes = [Transfer(mine, inbox[me], me, q, Signal(pad, me, epoch)) for q in node
                  if q != me or self_ok]
        # with lanes, one issue per push: the pushes take turns over the side streams
        for batch in [[t] for t in pushes] if options.get("lanes", 1) > 1 else [pushes]:
            engine.issue(batch)
        wait_slots(pad, 0, node, epoch, skip=-1 if self_ok else me)
        engine.drain()
        for q in node:
            if q != me or self_ok:
                torch.testing.assert_close(inbox[q].cpu(), _data(q, it, n, dtype))
                checks += 1
        inbox[me].copy_(mine)
        ditron.barrier()
        # pull: every node peer's row of its own inbox into a local tensor, signal myself
        epoch = pad.next_epoch()
        outs = {q: torch.full((n,), float("nan"), dtype=dtype, device=dev) for q in node}
        pulls = [Transfer(inbox[q], outs[q], q, me, Signal(pad, size + me, epoch))
                 for q in node if q != me]
        engine.issue(pulls)
        engine.drain()
        if pulls:
            wait_slots(pad, size, range(me, me + 1), epoch)
        for q in node:
            if q != me:
                torch.testing.assert_close(outs[q].cpu(), _data(q, it, n, dtype))
                checks += 1
        ditron.barrier()
        # reduce: add my payload into my right neighbour's row 0 (one writer per row)
        nxt = node[(me - node.start + 1) % len(node)]
        prv = node[(me - node.start - 1) % len(node)]
        base = _data(me + 50, it, n, dtype).to(dev)
        inbox[0].copy_(base)
        ditron.barrier()
        epoch = pad.next_epoch()
        if engine.can_reduce and nxt != me:
            engine.issue([Transfer(mine, inbox[0], me, nxt, Signal(pad, 2 * size, epoch),
                                   reduce=True)])
            wait_slots(pad, 2 * size, range(0, 1), epoch)
            engine.drain()
            expected = (base.float().cpu() + _data(prv, it, n, dtype).float()).to(dtype)
            tol = 1e-5 if dtype == torch.float32 else 1e-2
            torch.testing.assert_close(inbox[0].cpu(), expected, rtol=tol, atol=tol)
            checks += 1
        ditron.barrier()
        ditron.free(inbox)
    return checks


def check_network(n: int, calls: int = 3) -> int:
    """Two-sided transfers between every pair, including ranks on other (simulated) nodes."""
    w = ditron.world()
    me, size = w.rank, w.world_size
    engine = get_engine("network")
    pad = ditron.signal_pad("test_network", size)
    checks = 0
    for it in range(calls):
        dtype = DTYPES[it % 3]
        epoch = pad.next_epoch()
        mine = _data(me, it, n, dtype)
        boxes = {q: torch.full((n,), float("nan"), dtype=dtype) for q in range(size)}
        transfers = []
        for q in range(size):
            if q != me:
                transfers.append(Transfer(mine, mine, me, q))  # my send to q
                transfers.append(Transfer(boxes[q], boxes[q], q, me, Signal(pad, q, epoch)))
        engine.issue(transfers)
        engine.drain()
        wait_slots(pad, 0, range(size), epoch, skip=me)
        for q in range(size):
            if q != me:
                torch.testing.assert_close(boxes[q], _data(q, it, n, dtype))
                checks += 1
    return checks


@pytest.mark.parametrize("world_size", [2, 3])
@pytest.mark.parametrize("name,options", [("copy_engine", {}),
                                          ("copy_engine", {"lanes": 2}),
                                          ("sm", {}),
                                          ("sm", {"programs": 3, "block": 64}),
                                          ("tma", {}),
                                          ("tma", {"programs": 3, "block_rows": 2})])
def test_engine_moves_and_sums(world_size, name, options):
    # n = 1000: several blocks of 64 with 3 programs, not a multiple of the block; for tma,
    # 3 (16-bit) or 7 (fp32) rows of 512-byte boxes plus a tail
    n = 1000
    counts = ditron.launch(check_engine, world_size, name, options, n, backend="cpu")
    self_ok = name in ("sm", "tma")
    per_call = (world_size - 1 + self_ok) + (world_size - 1) + (name != "tma")
    assert all(c == 3 * per_call for c in counts)


def test_tma_engine_falls_back_on_unaligned_rows():
    # n = 1001 16-bit elements: inbox rows start at odd multiples of 2 bytes, so most
    # transfers break TMA's 16-byte alignment and move with plain loads/stores instead
    counts = ditron.launch(check_engine, 2, "tma", {}, 1001, backend="cpu")
    assert all(c == 3 * (2 + 1) for c in counts)


def test_engines_in_simulated_two_nodes(monkeypatch):
    """Shared-memory engines stay inside a node; the network engine crosses nodes."""
    monkeypatch.setenv("DITRON_LOCAL_WORLD_SIZE", "2")
    counts = ditron.launch(check_engine, 4, "copy_engine", {}, 33, backend="cpu")
    assert all(c == 3 * 3 for c in counts)
    counts = ditron.launch(check_network, 4, 33, backend="cpu")
    assert all(c == 3 * 3 for c in counts)


def check_engine_errors() -> int:
    me = ditron.world().rank
    x = torch.randn(4, 4)
    sm = get_engine("sm")
    buf = ditron.empty((4, 4))
    with pytest.raises(ValueError, match="contiguous"):
        sm.issue([Transfer(x.t(), buf, me, 1 - me)])
    with pytest.raises(ValueError, match="differ"):
        sm.issue([Transfer(x[:2], buf, me, 1 - me)])
    with pytest.raises(ValueError, match="differ"):
        get_engine("copy_engine").issue([Transfer(x, buf.half(), me, 1 - me)])
    with pytest.raises(ValueError, match="cross ranks"):
        get_engine("network").issue([Transfer(x, x, me, me)])
    with pytest.raises(ValueError, match="programs"):
        get_engine("sm", programs=0)
    with pytest.raises(ValueError, match="programs"):
        get_engine("tma", programs=0)
    with pytest.raises(ValueError, match="block_rows"):
        get_engine("tma", block_rows=3)
    with pytest.raises(ValueError, match="stages must be >= 1"):
        get_engine("tma", stages=0)
    with pytest.raises(ValueError, match="cannot reduce"):
        get_engine("tma").issue([Transfer(x, buf, me, 1 - me, reduce=True)])
    with pytest.raises(ValueError, match="clear_after needs a signal to wait for"):
        get_engine("copy_engine").issue([Transfer(buf, x, 1 - me, me, clear_after=True)])
    return 10


def test_engine_errors():
    assert ditron.launch(check_engine_errors, 2, backend="cpu") == [10, 10]
    with pytest.raises(ValueError, match="unknown transfer engine"):
        get_engine("pigeon")
    with pytest.raises(ValueError, match="lanes must be a positive int"):
        get_engine("copy_engine", lanes=0)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("name,options", [("copy_engine", {}), ("copy_engine", {"lanes": 2}),
                                          ("sm", {}), ("sm", {"programs": 4, "block": 256}),
                                          ("sm", {"concurrent": True}), ("tma", {}),
                                          ("tma", {"programs": 4, "concurrent": True}),
                                          ("tma", {"stages": 1, "block_rows": 32})])
def test_engine_cuda_two_ranks(name, options):
    counts = ditron.launch(check_engine, 2, name, options, 100_003, backend="cuda")
    self_ok = name in ("sm", "tma")
    per_call = (1 + self_ok) + 1 + (name != "tma")
    assert all(c == 3 * per_call for c in counts)


def check_stream_signals(n: int, rounds: int = 3) -> list[bool]:
    """Rank 0 writes rank 1's buffer after a long device sleep, then raises rank 1's slot
    with the host-issued notify; rank 1's stream-ordered wait must hold its read until then.
    Returns, per round on rank 1, whether the read saw the round's data."""
    from ditron.engines.sync import notify_one, use_stream_memops
    from ditron.runtime.world import current

    rt = current()
    assert use_stream_memops(), "the cuda backend without a timeout should use stream memops"
    me = rt.world.rank
    pad = ditron.signal_pad("test_stream_signals", 1)
    buf = ditron.zeros((n,), torch.float32)
    ditron.barrier()
    torch.cuda.synchronize()
    seen = []
    for rnd in range(1, rounds + 1):
        epoch = pad.next_epoch()
        if me == 0:
            torch.cuda._sleep(200_000_000)  # ~0.1 s of device time before the data moves
            rt.heap.peer(buf, 1).copy_(torch.full((n,), float(rnd), device=rt.world.device))
            notify_one(pad, 0, epoch, 1)
        else:
            wait_slots(pad, 0, range(0, 1), epoch)
            seen.append(bool((buf.clone() == rnd).all()))
        torch.cuda.synchronize()
        torch.distributed.barrier(group=rt.host_group)
    return seen


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_stream_memop_signals_cuda():
    seen = ditron.launch(check_stream_signals, 2, 1 << 20, backend="cuda")
    assert seen[1] == [True, True, True]


def check_after_signal() -> tuple[bool, str]:
    """A pull that waits for a signal (``Transfer.after``): it lands once the owner raises
    the signal; one whose signal never comes raises WaitTimeoutError at ``drain``; engines
    that cannot wait refuse ``after`` before moving anything."""
    from ditron.engines.sync import notify_peers

    w = ditron.world()
    me, peer = w.rank, 1 - w.rank
    pad = ditron.signal_pad("test_after", 2)
    box = ditron.zeros((64,), torch.float32)
    engine = get_engine("copy_engine")
    out = torch.full((64,), float("nan"))
    engine.issue([Transfer(box, out, peer, me, after=Signal(pad, peer, 1))])
    box.fill_(float(me + 1))  # publish, then raise the peer's slot ``me``
    notify_peers(pad, me, 1, range(2), skip=me)
    engine.drain()
    landed = bool((out == peer + 1).all())
    # a flag that its one waiter clears: the second pull waits for the same value, then
    # sets the slot back to 0
    out.fill_(float("nan"))
    engine.issue([Transfer(box, out, peer, me, after=Signal(pad, peer, 1), clear_after=True)])
    engine.drain()
    landed = landed and bool((out == peer + 1).all()) and int(pad.signals[peer]) == 0
    ditron.barrier()
    try:
        get_engine("sm").issue([Transfer(box, out, peer, me, after=Signal(pad, peer, 1))])
    except ValueError as exc:
        assert "after" in str(exc)
    else:
        raise AssertionError("the sm engine accepted after=")
    ditron.set_wait_timeout(0.3)
    engine.issue([Transfer(box, out, peer, me, after=Signal(pad, peer, 99))])
    try:
        engine.drain()
    except ditron.WaitTimeoutError as exc:
        return landed, f"{exc.rank} {exc.expected} {exc.seen} {exc.signal}"
    return landed, "no timeout"


def test_transfer_after_signal():
    got = ditron.launch(check_after_signal, 2, backend="cpu")
    assert got == [(True, "0 99 0 signals:test_after[1]"), (True, "1 99 0 signals:test_after[0]")]
