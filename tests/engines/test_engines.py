"""Transfer engines moved directly: push, pull, sum-while-moving, signals, repeated use."""

from __future__ import annotations

import time

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
                assert torch.equal(inbox[q].cpu(), _data(q, it, n, dtype)), (name, q, dtype)
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
                assert torch.equal(outs[q].cpu(), _data(q, it, n, dtype)), (name, q, dtype)
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
                assert torch.equal(boxes[q], _data(q, it, n, dtype)), (q, dtype)
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
    with pytest.raises(ValueError, match="stages must be a positive int"):
        get_engine("tma", stages=0)
    with pytest.raises(ValueError, match="programs must be a positive int, got 2.5"):
        get_engine("tma", programs=2.5)
    with pytest.raises(ValueError, match="programs must be a positive int, got 2.5"):
        get_engine("sm", programs=2.5)
    # a negative block copied nothing and raised the signal; 0 took the default
    for block in (-4, 0):
        with pytest.raises(ValueError, match="block must be a positive int"):
            get_engine("sm", block=block)
    with pytest.raises(ValueError, match="block must be a power of two"):
        get_engine("sm", block=100)
    with pytest.raises(ValueError, match="cannot reduce"):
        get_engine("tma").issue([Transfer(x, buf, me, 1 - me, reduce=True)])
    with pytest.raises(ValueError, match="clear_after needs a signal to wait for"):
        get_engine("copy_engine").issue([Transfer(buf, x, 1 - me, me, clear_after=True)])
    return 15


def test_engine_errors():
    assert ditron.launch(check_engine_errors, 2, backend="cpu") == [15, 15]
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


def check_bad_batches() -> tuple[bool, int, float]:
    """A batch with one transfer the engine cannot move raises ``ValueError`` before any
    of it moves. Returns whether anything landed in this rank's box or pad from the peer's
    refused batches, the network receive's slot after its refused batch's drain, and what
    its receive buffer holds."""
    w = ditron.world()
    me, peer = w.rank, 1 - w.rank
    pad = ditron.signal_pad("test_bad_batches", 2)
    box = ditron.zeros((64,), torch.float32)
    mine = torch.ones(64, device=w.device)
    gone = ditron.zeros((64,), torch.float32)
    ditron.free(gone)
    ditron.barrier()
    good = Transfer(mine, box, me, peer, Signal(pad, 0, 1))
    bad = {r"dst_rank must be an int in \[0, 2\), got 7": Transfer(mine, box, me, 7),
           "signal slot 2 is outside its pad's 2 slots":
               Transfer(mine, box, me, peer, Signal(pad, 2, 1)),
           "signal slot -1 is outside": Transfer(mine, box, me, peer, Signal(pad, -1, 1)),
           "must be a symmetric tensor":
               Transfer(mine, torch.zeros(64, device=w.device), me, peer),
           "must be a symmetric tensor: .* not inside one live symmetric buffer":
               Transfer(mine, gone, me, peer)}
    for name in ("copy_engine", "sm", "tma"):
        engine = get_engine(name)
        for match, t in bad.items():
            with pytest.raises(ValueError, match=match):
                engine.issue([good, t])
            engine.drain()
    if w.device.type == "cuda":
        torch.cuda.synchronize()
    ditron.barrier()
    landed = bool(box.any()) or bool(pad.signals.any())
    ditron.barrier()
    # the network engine: a refused batch leaves no receive posted and no signal to raise
    net = get_engine("network")
    inbox = torch.full((64,), -1.0, device=w.device)
    with pytest.raises(ValueError, match="cross ranks"):
        net.issue([Transfer(inbox, inbox, peer, me, Signal(pad, 1, 5)),
                   Transfer(mine, mine, me, me)])
    net.drain()
    return landed, int(pad.signals[1]), float(inbox[0])


def test_bad_batch_moves_nothing():
    # before: the sm engine wrote the signal past its pad (into the box), the tma engine
    # moved the good transfer before refusing the bad one, and the network engine raised
    # the refused receive's signal at its next drain, with nothing received; on CUDA the
    # copy engine's driver-call path copied into a peer's freed buffer
    assert ditron.launch(check_bad_batches, 2, backend="cpu") == [(False, 0, -1.0)] * 2


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_bad_batch_moves_nothing_cuda():
    assert ditron.launch(check_bad_batches, 2, backend="cuda") == [(False, 0, -1.0)] * 2


def check_freed_after_use() -> list[str]:
    """A transfer into a peer's buffer that worked, repeated once that buffer is freed, is
    refused by every heap engine (the sm engine's cached descriptor table skipped the check
    and wrote into the freed block)."""
    w = ditron.world()
    me, peer = w.rank, 1 - w.rank
    errors = []
    for name in ("copy_engine", "sm", "tma"):
        box = ditron.zeros((64,), torch.float32)
        ditron.barrier()
        engine = get_engine(name)
        x = torch.ones(64, device=w.device)
        engine.issue([Transfer(x, box, me, peer)])
        engine.drain()
        ditron.barrier()
        ditron.free(box)
        try:
            engine.issue([Transfer(x, box, me, peer)])
            engine.drain()
            errors.append(f"{name}: accepted")
        except ValueError as exc:
            errors.append(f"{name}: {'not inside one live symmetric buffer' in str(exc)}")
        ditron.barrier()
    return errors


def test_engines_refuse_a_buffer_freed_after_use():
    assert ditron.launch(check_freed_after_use, 2, backend="cpu") == [
        ["copy_engine: True", "sm: True", "tma: True"]] * 2


def check_other_node() -> list[str]:
    """The heap engines refuse a peer on another (simulated) node before moving anything."""
    me = ditron.world().rank
    box = ditron.zeros((8,), torch.float32)
    other = (me + 2) % 4
    errors = []
    for name in ("copy_engine", "sm", "tma"):
        with pytest.raises(ValueError, match=f"rank {other} is on another node") as info:
            get_engine(name).issue([Transfer(torch.ones(8), box, me, other)])
        errors.append(str(info.value).split(":")[0])
    return errors


def test_heap_engines_refuse_other_nodes(monkeypatch):
    # before: the sm engine's kernel translated into an unmapped heap (SIGSEGV)
    monkeypatch.setenv("DITRON_LOCAL_WORLD_SIZE", "2")
    got = ditron.launch(check_other_node, 4, backend="cpu")
    assert got == [["copy_engine", "sm engine", "tma engine"]] * 4


MOVED = (torch.bool, torch.float8_e4m3fn, torch.int16, torch.uint16, torch.complex64,
         torch.float64)


def check_moved_dtypes(name: str, n: int) -> list[bool]:
    """Push a payload of every dtype of ``MOVED`` to the right neighbour; whether each
    arrived bit for bit."""
    w = ditron.world()
    me, size = w.rank, w.world_size
    right, left = (me + 1) % size, (me - 1) % size
    engine = get_engine(name)
    pad = ditron.signal_pad(f"test_moved:{name}", 1)
    same = []
    for dtype in MOVED:
        box = ditron.zeros((n,), dtype)
        ditron.barrier()
        epoch = pad.next_epoch()
        payload = _bits(me, n, dtype).to(w.device)
        engine.issue([Transfer(payload, box, me, right, Signal(pad, 0, epoch))])
        wait_slots(pad, 0, range(0, 1), epoch)
        engine.drain()
        same.append(torch.equal(box.view(torch.uint8).cpu(),
                                _bits(left, n, dtype).view(torch.uint8)))
        ditron.barrier()
        ditron.free(box)
    return same


def _bits(rank: int, n: int, dtype: torch.dtype) -> torch.Tensor:
    g = torch.Generator().manual_seed(rank)
    raw = torch.randint(0, 256, (n * dtype.itemsize,), generator=g, dtype=torch.uint8)
    if dtype == torch.bool:
        raw = raw % 2
    return raw.view(dtype)


@pytest.mark.parametrize("name", ["copy_engine", "sm", "tma"])
def test_engines_move_any_dtype(name):
    # before: the sm engine raised KeyError for every dtype outside the native ones, the
    # tma engine a descriptor error for bool and KeyError for complex64
    n = 1000  # tma: rows of 512-byte boxes plus a tail for every width
    got = ditron.launch(check_moved_dtypes, 3, name, n, backend="cpu")
    assert got == [[True] * len(MOVED)] * 3


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("name", ["copy_engine", "sm", "tma"])
def test_engines_move_any_dtype_cuda(name):
    got = ditron.launch(check_moved_dtypes, 2, name, 100_003, backend="cuda")
    assert got == [[True] * len(MOVED)] * 2


def check_drain_after_failure() -> tuple[str, float]:
    """Two batches whose ``after`` never comes in time: ``drain`` raises the first one's
    timeout only once the second one has ended too, so nothing lands after it returns."""
    me = ditron.world().rank
    pad = ditron.signal_pad("test_drain_failure", 2)
    src, out = torch.ones(8), torch.zeros(8)
    engine = get_engine("copy_engine")
    ditron.set_wait_timeout(0.3)
    engine.issue([Transfer(src, out, me, me, after=Signal(pad, 0, 1))])
    engine.issue([Transfer(src, out, me, me, after=Signal(pad, 1, 1))])
    try:
        engine.drain()
    except ditron.WaitTimeoutError as exc:
        error = exc.signal
    else:
        error = "no timeout"
    pad.signals[1].fill_(1)  # too late: the second batch must have given up already
    time.sleep(0.2)
    return error, float(out.sum())


def test_copy_engine_drain_waits_for_every_batch():
    # before: drain raised at the first failed batch and returned while the second still
    # polled, which then copied into ``out`` once its signal came
    got = ditron.launch(check_drain_after_failure, 1, backend="cpu")
    assert got == [("signals:test_drain_failure[0]", 0.0)]


#: dtypes a reducing transfer of the copy and network engines refuses (before: bool summed
#: as a logical or, the others raised NotImplementedError from torch's add after the data
#: had moved, leaving the signal unraised)
UNSUMMABLE = (torch.bool, torch.float8_e4m3fn, torch.float8_e5m2, torch.uint16,
              torch.complex32)


def _good_move(pad_name: str):
    """``(me, peer, pad, box, good)``: a 2-slot pad and an 8-float symmetric box (zeroed,
    then a barrier) and a valid transfer of ones into the peer's box raising slot 0."""
    w = ditron.world()
    me, peer = w.rank, 1 - w.rank
    pad = ditron.signal_pad(pad_name, 2)
    box = ditron.zeros((8,), torch.float32)
    ditron.barrier()
    return me, peer, pad, box, Transfer(torch.ones(8), box, me, peer, Signal(pad, 0, 1))


def check_reduce_dtypes() -> tuple[list[str], bool, list[list]]:
    """Reducing transfers of each dtype of ``UNSUMMABLE`` (in a batch after a good plain
    move) through the copy and the network engine: the error of each, whether anything
    landed, and the sums of int16 and complex64, which are summed."""
    me, peer, pad, box, good = _good_move("test_reduce_dtypes")
    errors = []
    for name in ("copy_engine", "network"):
        engine = get_engine(name)
        for dtype in UNSUMMABLE:
            x = torch.zeros(8, dtype=dtype)
            if name == "copy_engine":
                sums = [Transfer(x, ditron.zeros((8,), dtype), me, peer, reduce=True)]
            else:  # two-sided: my send, and my receive summed into x
                sums = [Transfer(x, x, me, peer), Transfer(x, x, peer, me, Signal(pad, 1, 1),
                                                           reduce=True)]
            with pytest.raises(ValueError, match=f"{name}.*cannot sum dtype {dtype}") as info:
                engine.issue([good, *sums] if name == "copy_engine" else sums)
            engine.drain()
            errors.append(str(info.value).split(";")[0])
    ditron.barrier()
    landed = bool(box.any()) or bool(pad.signals.any())
    ditron.barrier()
    got = []
    for dtype in (torch.int16, torch.complex64):
        mine = (torch.arange(8) * (me + 1)).to(dtype)
        dst = ditron.zeros((8,), dtype)
        dst.copy_(torch.full((8,), 3).to(dtype))
        inbox = torch.full((8,), 5).to(dtype)
        ditron.barrier()
        copy, net = get_engine("copy_engine"), get_engine("network")
        copy.issue([Transfer(mine, dst, me, peer, reduce=True)])
        net.issue([Transfer(mine, mine, me, peer), Transfer(inbox, inbox, peer, me,
                                                            reduce=True)])
        copy.drain()
        net.drain()
        ditron.barrier()
        got.append([dst.tolist(), inbox.tolist()])
    return errors, landed, got


def test_reducing_transfers_refuse_unsummable_dtypes():
    got = ditron.launch(check_reduce_dtypes, 2, backend="cpu")
    for rank, (errors, landed, sums) in enumerate(got):
        assert errors == [f"{name}: cannot sum dtype {d} into the destination"
                          for name in ("copy_engine", "network engine") for d in UNSUMMABLE]
        assert not landed
        other = torch.arange(8) * (2 - rank)  # the peer's payload
        assert sums[0] == [(3 + other).tolist(), (5 + other).tolist()]  # int16
        assert sums[1] == [(3 + other).to(torch.complex64).tolist(),
                           (5 + other).to(torch.complex64).tolist()]


def check_signal_values() -> tuple[list[str], bool]:
    """Transfers whose signal (or ``after``) value is not an int64, after a good one in
    their batch, for every engine: the errors, and whether anything landed."""
    me, peer, pad, box, good = _good_move("test_signal_values")
    errors = []
    for name in ("copy_engine", "sm", "tma", "network"):
        engine = get_engine(name)
        for value in (1 << 63, 1.5, "3"):
            if name == "network":
                batch = [Transfer(torch.ones(8), torch.ones(8), peer, me, Signal(pad, 1, value))]
            else:
                batch = [good, Transfer(torch.ones(8), box, me, peer, Signal(pad, 0, value))]
            with pytest.raises(ValueError, match="signal value .* is not an int64") as info:
                engine.issue(batch)
            engine.drain()
            errors.append(str(info.value))
    with pytest.raises(ValueError, match="after value -9223372036854775809 is not an int64"):
        get_engine("copy_engine").issue([Transfer(box, torch.ones(8), peer, me,
                                                  after=Signal(pad, peer, -(1 << 63) - 1))])
    ditron.barrier()
    return errors, bool(box.any()) or bool(pad.signals.any())


def test_signal_values_must_be_int64():
    # before: 2**63 wrapped to -2**63 in the sm and tma engines' kernels (a consumer waiting
    # for it never saw it) and 1.5 was truncated to 1; the copy and network engines raised
    # from their worker or drain, after the data had moved, and left the signal unraised
    got = ditron.launch(check_signal_values, 2, backend="cpu")
    for rank, (errors, landed) in enumerate(got):
        assert len(errors) == 12 and not landed
        assert errors[:3] == [f"copy_engine: signal value {v!r} is not an int64 (or a "
                              f"DeviceValue) (transfer 1 of a batch of 2: rank {rank} to "
                              f"rank {1 - rank})" for v in (1 << 63, 1.5, "3")]


def check_stepped_ranges() -> int:
    """``notify_peers``, ``wait_slots`` and ``bump_and_notify`` refuse a range of ranks with
    a step; returns this rank's slot afterwards (nothing may have raised it)."""
    from ditron.engines.sync import bump_and_notify, notify_peers

    pad = ditron.signal_pad("test_stepped_ranges", 3)
    ditron.barrier()
    with pytest.raises(ValueError, match=r"notify_peers: ranks must be a range of step 1"):
        notify_peers(pad, 0, 7, range(0, 3, 2))
    with pytest.raises(ValueError, match=r"wait_slots: ranks must be a range of step 1"):
        wait_slots(pad, 0, range(0, 3, 2), 7)
    with pytest.raises(ValueError, match=r"bump_and_notify: ranks must be a range of step 1"):
        bump_and_notify(pad, 0, range(0, 3, 2))
    ditron.barrier()
    return int(pad.signals.sum())


def test_signal_kernels_refuse_stepped_ranges():
    # before: the kernels took the range's start and length, so range(0, 3, 2) notified
    # ranks 0 and 1 (CPU, or CUDA with a wait timeout; stream memops notified 0 and 2)
    assert ditron.launch(check_stepped_ranges, 3, backend="cpu") == [0, 0, 0]
