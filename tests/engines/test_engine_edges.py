"""Transfer engines on edge inputs: overlapping or shared memory, conjugate and negative
views, inference tensors, NumPy integers, several worlds in one process."""

from __future__ import annotations

import functools

import numpy as np
import pytest
import torch

import ditron
from ditron.engines import Signal, Transfer, get_engine
from ditron.engines.sync import wait_slots
from ditron.runtime.signals import drop_signal_pad
from ditron.runtime.world import current

HEAP_ENGINES = (("copy_engine", {}), ("sm", {"programs": 3, "block": 64}),
                ("tma", {"programs": 2, "block_rows": 2}))


def on_rank_device(check):
    """Runs a rank's check with its tensors made on the rank's device by default."""
    @functools.wraps(check)
    def run(*args):
        with torch.device(ditron.world().device):
            return check(*args)
    return run


@on_rank_device
def check_local_overlap() -> list[str]:
    """Rank-local transfers whose ``src`` and ``dst`` overlap: refused before anything
    moves (partly overlapping, or the same memory transposed); the same tensor, and
    interleaved strided views (copy engine), move."""
    me = ditron.world().rank
    buf = ditron.zeros((2000,), torch.float32)
    got = []
    for name, options in HEAP_ENGINES:
        engine = get_engine(name, **options)
        for src, dst in ((buf[0:1500], buf[100:1600]), (buf[100:1600], buf[0:1500]),
                         (buf[:16].view(4, 4), buf[:16].view(4, 4).t())
                         if name == "copy_engine" else (buf[8:24], buf[0:16])):
            buf.copy_(torch.arange(2000.0))
            with pytest.raises(ValueError, match="within rank 0 overlap in memory"):
                engine.issue([Transfer(src, dst, me, me)])
            engine.drain()
            got.append(torch.equal(buf, torch.arange(2000.0)))
        buf.copy_(torch.arange(2000.0))
        engine.issue([Transfer(buf[:500], buf[:500], me, me)])  # the same tensor
        engine.drain()
        got.append(torch.equal(buf, torch.arange(2000.0)))
        if engine.can_reduce:
            engine.issue([Transfer(buf[:500], buf[:500], me, me, reduce=True)])
            engine.drain()
            got.append(torch.equal(buf[:500], 2 * torch.arange(500.0)))
    buf.copy_(torch.arange(2000.0))
    engine = get_engine("copy_engine")
    engine.issue([Transfer(buf[0::2], buf[1::2], me, me)])  # interleaved: no shared element
    engine.drain()
    got.append(torch.equal(buf[1::2], torch.arange(0.0, 2000.0, 2)))
    return got


def test_engines_refuse_overlapping_local_transfers(backend):
    # before: the copy engine raised torch's RuntimeError from drain (its worker), the sm
    # engine (3 programs) and the tma engine copied blocks that others had already written
    got = ditron.launch(check_local_overlap, 1, backend=backend)[0]
    assert got == [True] * len(got) and len(got) == 15


@on_rank_device
def check_views_of_other_bits() -> tuple[list[str], bool, int]:
    """Conjugate and negative views on either side, after a good transfer in their batch,
    through every engine: the errors, whether anything landed, the network receive's slot
    after a later drain."""
    w = ditron.world()
    me, peer = w.rank, 1 - w.rank
    pad = ditron.signal_pad("test_other_bits", 2)
    box = ditron.zeros((8,), torch.float32)
    cbox = ditron.zeros((8,), torch.complex64)
    ditron.barrier()
    good = Transfer(torch.ones(8), box, me, peer, Signal(pad, 0, 1))
    z = torch.complex(torch.ones(8), torch.arange(8.0))
    errors = []
    for name, _ in HEAP_ENGINES:
        engine = get_engine(name)
        for bad in (Transfer(z.conj(), cbox, me, peer),  # sm, tma: torch's RuntimeError
                    Transfer(z, cbox.conj(), me, peer)):  # copy_engine: landed unconjugated
            with pytest.raises(ValueError, match="must not be conjugate or negative views"):
                engine.issue([good, bad])
            engine.drain()
            errors.append(name)
        if name == "copy_engine":  # strided, as the others refuse any strided tensor
            with pytest.raises(ValueError, match="must not be conjugate or negative views"):
                engine.issue([good, Transfer(z.conj().imag, box, me, peer)])
            errors.append(name)
    net = get_engine("network")
    inbox = torch.zeros(8, dtype=torch.complex64)
    # before: torch's RuntimeError from the send, after the receive was posted and its
    # signal queued for the next drain
    with pytest.raises(ValueError, match="must not be conjugate or negative views"):
        net.issue([Transfer(inbox, inbox, peer, me, Signal(pad, 1, 5)),
                   Transfer(z.conj(), z.conj(), me, peer)])
    net.drain()
    errors.append("network")
    ditron.barrier()
    return errors, bool(box.any()) or bool(cbox.any()), int(pad.signals.sum())


def test_engines_refuse_conjugate_and_negative_views(backend):
    got = ditron.launch(check_views_of_other_bits, 2, backend=backend)
    assert got == [(["copy_engine"] * 3 + ["sm"] * 2 + ["tma"] * 2 + ["network"], False,
                    0)] * 2


@on_rank_device
def check_shared_dst() -> tuple[bool, list[float]]:
    """A ``dst`` whose elements share memory (``expand``) through the copy and network
    engines: refused at issue; returns whether anything landed, and what a network receive
    whose sender's stand-in ``dst`` is expanded brought."""
    w = ditron.world()
    me, peer = w.rank, 1 - w.rank
    pad = ditron.signal_pad("test_shared_dst", 2)
    box = ditron.zeros((8,), torch.float32)
    ditron.barrier()
    with pytest.raises(ValueError, match="dst has elements that share memory"):
        get_engine("copy_engine").issue([Transfer(torch.ones(8), box[:1].expand(8), me,
                                                  peer, Signal(pad, 0, 1))])
    net = get_engine("network")
    one = torch.zeros(1)
    with pytest.raises(ValueError, match="dst has elements that share memory"):
        net.issue([Transfer(one.expand(8), one.expand(8), peer, me, Signal(pad, 1, 1))])
    net.drain()
    ditron.barrier()
    landed = bool(box.any()) or bool(one.any()) or bool(pad.signals.any())
    # the network engine's stand-in sides are not checked: an expanded one is fine
    inbox = torch.zeros(8)
    net.issue([Transfer(torch.full((8,), 3.0), one.expand(8), me, peer),
               Transfer(one.expand(8), inbox, peer, me)])
    net.drain()
    return landed, inbox.tolist()


def test_engines_refuse_a_dst_sharing_memory(backend):
    # before: torch refused the write at drain (the copy engine's worker, the network
    # engine's landing copy), after the batch was issued: the signal never came
    assert ditron.launch(check_shared_dst, 2, backend=backend) == [(False, [3.0] * 8)] * 2


@on_rank_device
def check_inference_landing() -> tuple[list[float], list[float], int]:
    """The network engine receiving, outside inference mode, into tensors made under it:
    a strided view and a sum (the received data lands through a copy at drain)."""
    w = ditron.world()
    me, peer = w.rank, 1 - w.rank
    pad = ditron.signal_pad("test_inference_landing", 1)
    with torch.inference_mode():
        strided, summed = torch.zeros(4), torch.ones(4)
    net = get_engine("network")
    mine = torch.arange(4.0) + 10 * me
    net.issue([Transfer(mine, mine, me, peer), Transfer(mine, mine, me, peer),
               Transfer(strided.view(2, 2).t(), strided.view(2, 2).t(), peer, me),
               Transfer(summed, summed, peer, me, Signal(pad, 0, 3), reduce=True)])
    net.drain()
    return strided.tolist(), summed.tolist(), int(pad.signals[0])


def test_network_engine_lands_into_inference_tensors(backend):
    # before: RuntimeError("Inplace update to inference tensor outside InferenceMode") from
    # drain, after the data came and before the signal (the copy engine wrote them)
    got = ditron.launch(check_inference_landing, 2, backend=backend)
    for rank, (strided, summed, slot) in enumerate(got):
        other = torch.arange(4.0) + 10 * (1 - rank)
        assert strided == other.view(2, 2).t().reshape(-1).tolist()
        assert summed == (other + 1).tolist() and slot == 3


@on_rank_device
def check_numpy_integers(name: str) -> tuple[float, int]:
    """A push whose ranks, signal slot and value are NumPy integers (integer arguments)."""
    w = ditron.world()
    me, peer = w.rank, 1 - w.rank
    pad = ditron.signal_pad(f"test_numpy:{name}", 2)
    box = ditron.zeros((8,), torch.float32)
    ditron.barrier()
    engine = get_engine(name)
    engine.issue([Transfer(torch.full((8,), 2.0), box, np.int64(me), np.int64(peer),
                           Signal(pad, np.int64(1), np.int64(7)))])
    wait_slots(pad, 1, range(0, 1), 7)
    engine.drain()
    return float(box.sum()), int(pad.signals[1])


@pytest.mark.parametrize("name", ["sm", "tma"])
def test_engines_take_numpy_integers(name, backend):
    # before: the kernels refused the NumPy signal value the check accepted
    # (InterpreterError: cannot convert 7 of type numpy.int64 to tensor)
    assert ditron.launch(check_numpy_integers, 2, name, backend=backend) == [(16.0, 7)] * 2


@on_rank_device
def check_other_world() -> str:
    """An sm engine used in the job's world, then in a world of ranks {0, 1} with the
    same transfer (the same addresses and ranks): that world's heap does not hold the
    job's buffer."""
    job_world = ditron.world()
    me = job_world.rank
    pair = ditron.init(group=[0, 1] if me < 2 else [2])  # current from here on
    with ditron.use(job_world):
        box = ditron.zeros((8,), torch.float32)
        ditron.barrier()
        engine = get_engine("sm")
        src = torch.ones(8)
        if me < 2:
            engine.issue([Transfer(src, box, me, 1 - me)])
            engine.drain()
        ditron.barrier()
    if me == 2:
        return ""
    assert pair.rank == me
    # the heaps' counts of frees alike, so that only the heap tells the two tables apart
    with ditron.use(job_world):
        job_frees = current().heap.frees
    while current().heap.frees < job_frees:  # collective over the pair only
        ditron.free(ditron.zeros((1,)))
    assert current().heap.frees == job_frees
    with pytest.raises(ValueError, match="must be a symmetric tensor") as info:
        engine.issue([Transfer(src, box, me, 1 - me)])
    return str(info.value).split(":")[0]


def test_sm_engine_tables_belong_to_their_world(backend):
    # before: the cached descriptor table of the job's world skipped the check in the
    # pair's world, and the kernel translated the job's address with the pair's heap bases
    got = ditron.launch(check_other_world, 3, backend=backend)
    assert got == ["sm engine", "sm engine", ""]


class _FailedWork:
    def wait(self) -> None:
        raise RuntimeError("the peer went away")


@on_rank_device
def check_drain_after_a_failed_wait() -> tuple[list[float], int]:
    """A network drain whose wait raises, then a drain with nothing issued: the failed
    batch's landing copy and signal are dropped with it, not carried to the next drain."""
    pad = ditron.signal_pad("test_failed_network_wait", 1)
    net = get_engine("network")
    dst = torch.zeros(4)
    net._works.append(_FailedWork())  # stands for a receive whose peer failed
    net._landing.append((torch.ones(4), dst, False))
    net._signals.append(Signal(pad, 0, 5))
    with pytest.raises(RuntimeError, match="the peer went away"):
        net.drain()
    net.drain()
    return dst.tolist(), int(pad.signals[0])


def test_network_drain_after_a_failed_wait_forgets_its_batch(backend):
    # before: the next drain copied the failed batch's buffer and raised its signal
    assert ditron.launch(check_drain_after_a_failed_wait, 1, backend=backend) == [
        ([0.0] * 4, 0)]


@on_rank_device
def check_dropped_pad() -> list[tuple[str, int]]:
    """A transfer raising a slot of a pad dropped since its last use, through every heap
    engine: the error, and what the freed slot holds afterwards on this rank."""
    w = ditron.world()
    me, peer = w.rank, 1 - w.rank
    box = ditron.zeros((8,), torch.float32)
    got = []
    for name, options in HEAP_ENGINES:
        pad = ditron.signal_pad("test_dropped_pad", 2)
        ditron.barrier()
        engine = get_engine(name, **options)
        engine.issue([Transfer(torch.ones(8), box, me, peer, Signal(pad, 1, 3))])
        engine.drain()
        ditron.barrier()
        drop_signal_pad("test_dropped_pad")
        with pytest.raises(ValueError, match="signal pad of a transfer from rank") as info:
            engine.issue([Transfer(torch.ones(8), box, me, peer, Signal(pad, 1, 77))])
        engine.drain()
        ditron.barrier()
        got.append((str(info.value).split(":")[0], int(pad.signals[1])))  # freed memory
    return got


def test_engines_refuse_a_dropped_signal_pad(backend):
    # before: the sm and tma engines' kernels raised the slot in the freed block (whatever
    # buffer is made there next); the copy engine refused it with ditron.peer's error
    got = ditron.launch(check_dropped_pad, 2, backend=backend)
    assert got == [[("copy_engine", 3), ("sm engine", 3), ("tma engine", 3)]] * 2


@on_rank_device
def check_dropped_pad_elsewhere() -> list[str]:
    """A pad dropped (and one retired, then freed), used through every host-issued signal
    and as a copy-engine transfer's ``after``: each error's first words. Nothing may be
    written into the freed blocks, which the next buffers reuse."""
    from ditron.engines import sync
    from ditron.runtime.signals import free_retired_pads

    w = ditron.world()
    me, peer = w.rank, (w.rank + 1) % w.world_size
    pad = ditron.signal_pad("test_dropped_elsewhere", 2)
    pad.device_epoch()
    drop_signal_pad("test_dropped_elsewhere")
    old = ditron.signal_pad("test_retired_elsewhere", 1)
    ditron.signal_pad("test_retired_elsewhere", 8)  # replaces (retires) ``old``
    free_retired_pads()
    box = ditron.zeros((8,), torch.float32)
    ditron.barrier()
    calls = (
        lambda p: sync.notify_one(p, 0, 5, peer),
        lambda p: sync.wait_one(p, 0, 5),
        lambda p: sync.notify_peers(p, 0, 5, range(w.world_size)),
        lambda p: sync.wait_slots(p, 0, range(0, 1), 5),
        lambda p: sync.bump_and_notify(p, 0, range(w.world_size)),
        lambda p: get_engine("copy_engine").issue(
            [Transfer(torch.ones(8), box, me, peer, after=Signal(p, 0, 1))]),
    )
    got = []
    for p in (pad, old):
        for call in calls:
            with pytest.raises(ValueError, match="freed") as info:
                call(p)
            got.append(str(info.value).split(":")[0])
    get_engine("copy_engine").drain()
    ditron.barrier()
    assert not box.any()
    return got


@pytest.mark.parametrize("world_size", [1, 2])
def test_host_signals_refuse_a_dropped_pad(backend, world_size):
    # before: on CUDA every host-issued signal wrote into (or waited on) the freed block
    # through the pad's cached addresses; the copy engine's CUDA path raised a dropped
    # pad's slot that way too (its CPU path refused it through ditron.peer)
    got = ditron.launch(check_dropped_pad_elsewhere, world_size, backend=backend)
    names = ["notify_one", "wait_one", "notify_peers", "wait_slots", "bump_and_notify",
             "copy_engine"]
    assert got == [names * 2] * world_size


def check_off_device_sides() -> list[str]:
    """A transfer with a side off this rank's device (host memory on a CUDA rank, a meta
    tensor on a CPU rank) through the sm and tma engines: refused before anything moves
    (their kernels take raw addresses from a table); the error's first words."""
    w = ditron.world()
    me, peer = w.rank, (w.rank + 1) % w.world_size
    box = ditron.zeros((8,), torch.float32)
    other = torch.device("cpu" if w.device.type == "cuda" else "meta")
    ditron.barrier()
    got = []
    for name, options in HEAP_ENGINES[1:]:
        engine = get_engine(name, **options)
        with pytest.raises(ValueError, match="must be on this rank's device") as info:
            engine.issue([Transfer(torch.ones(8, device=other), box, me, peer)])
        got.append(str(info.value).split(":")[0])
        engine.drain()
    ditron.barrier()
    assert not box.any()
    return got


def test_kernel_engines_refuse_sides_off_the_device(backend):
    # before: on CUDA the sm and tma kernels were handed the host tensor's address in their
    # table (no launcher check sees it); on CPU a meta tensor failed inside the interpreter
    # ("Cannot copy out of meta tensor")
    assert ditron.launch(check_off_device_sides, 2, backend=backend) == [
        ["sm engine", "tma engine"]] * 2


def check_refusal_names_the_transfer() -> list[str]:
    """A batch whose third transfer is refused, through every engine: each error's
    suffix."""
    w = ditron.world()
    me, peer = w.rank, 1 - w.rank
    box = ditron.zeros((8,), torch.float32)
    ditron.barrier()
    good = Transfer(torch.ones(8), box, me, peer)
    bad = Transfer(torch.ones(8), box[:4], me, peer)  # shapes differ
    got = []
    for name, options in (*HEAP_ENGINES, ("network", {})):
        with pytest.raises(ValueError, match="src .* and dst .* differ") as info:
            get_engine(name, **options).issue([good, good, bad, good])
        got.append(str(info.value).split("differ")[1])
    return got


def test_refusals_name_the_transfer():
    # before: "sm engine: src (8,) torch.float32 and dst (4,) torch.float32 differ", with
    # nothing to tell which transfer of the batch it meant
    got = ditron.launch(check_refusal_names_the_transfer, 2, backend="cpu")
    for rank, errors in enumerate(got):
        assert errors == [f" (transfer 2 of a batch of 4: rank {rank} to rank {1 - rank})"] * 4



@on_rank_device
def check_remote_refusals_name_the_transfer() -> list:
    """A batch whose third push lands in an ordinary tensor (not symmetric: no peer has
    it): each heap engine's error names that transfer, and the good pushes before it have
    not moved or raised their signal."""
    w = ditron.world()
    me, peer = w.rank, 1 - w.rank
    box = ditron.zeros((16,), torch.float32)
    pad = ditron.signal_pad("test_remote_refusal", 1)
    ditron.barrier()
    goods = [Transfer(torch.full((8,), 3.0), box[k: k + 8], me, peer, Signal(pad, 0, 1))
             for k in (0, 8)]
    bad = Transfer(torch.ones(8), torch.zeros(8), me, peer)
    got = []
    for name, options in HEAP_ENGINES:
        with pytest.raises(ValueError, match="must be a symmetric tensor") as info:
            get_engine(name, **options).issue([*goods, bad])
        got.append(str(info.value).rsplit(" (", 1)[1])
    ditron.barrier()
    got.append((float(box.sum()), int(pad.signals[0])))
    return got


def test_remote_refusals_name_the_transfer():
    # before: "sm engine: the remote side of a transfer from rank 0 to rank 1 must be a
    # symmetric tensor: ..." without its place in the batch (docs/collectives.md says
    # every refusal names it)
    got = ditron.launch(check_remote_refusals_name_the_transfer, 2, backend="cpu")
    for rank, out in enumerate(got):
        assert out == [f"transfer 2 of a batch of 3: rank {rank} to rank {1 - rank})"] * 3 + [
            (0.0, 0)]
