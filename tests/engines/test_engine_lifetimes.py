"""Device state the ``sm`` and ``tma`` engines keep across issues (descriptor tables, the
counter) lives until the launches that use it have passed, on whatever stream they ran.

A table evicted from the ``sm`` engine's cache, or state of an engine that is dropped,
records the streams other than its allocation stream that read it (``Tensor.record_stream``)
before its memory goes back to the caching allocator; a table a CUDA graph captured is never
let go; the ``tma`` engine zeroes its counter without blocking the host, in the order of
the launches that use it. CUDA's stream objects and queries are stood in for on the CPU
backend (as in ``test_engine_stream_order.py``); the transfers still move and are checked
against fresh payloads. The ``gpu`` tests check the same on a GPU's caching allocator."""

from __future__ import annotations

import gc
import importlib
import time

import pytest
import torch

import ditron
from ditron.engines import Signal, Transfer, get_engine
from ditron.engines.sync import wait_slots
from ditron.runtime import stream_order


class _Stream:
    """Stands in for ``torch.cuda.Stream``: a name, and the streams it waits for."""

    def __init__(self, name: str, log: list | None = None) -> None:
        self.name, self.log = name, log

    def wait_stream(self, other: _Stream) -> None:
        self.log.append((self.name, other.name))


def _log_records() -> list:
    """Replace ``Tensor.record_stream`` (in a launched rank's process, or under
    ``monkeypatch``'s undo) by a log of ``(data_ptr, stream name)``."""
    records: list = []
    torch.Tensor.record_stream = lambda self, s: records.append((self.data_ptr(), s.name))
    return records


def _payload(seed: int, step: int, rank: int, n: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed + 100 * step + rank)
    return torch.randn(n, generator=g)


def test_kept_records_its_readers_when_let_go(monkeypatch):
    # the allocation stream (no record needed: the allocator orders reuse there) is None
    # on the CPU, so any noted handle is another stream; each is recorded once
    from ditron.engines.streams import Kept

    records: list = []
    monkeypatch.setattr(torch.Tensor, "record_stream",
                        lambda self, s: records.append((self.data_ptr(), s.name)))
    kept = Kept(torch.zeros(4, dtype=torch.int64))
    ptr = kept.tensor.data_ptr()
    kept.used_on(None)  # the CPU backend: nothing to note
    kept.used_on(11, _Stream("side"))
    kept.used_on(11, _Stream("side again"))  # the same stream: noted once
    kept.used_on(12, _Stream("other"))
    assert [s.name for s in kept.readers()] == ["side", "other"]
    assert records == []  # nothing recorded while it is kept
    del kept
    gc.collect()
    assert records == [(ptr, "side"), (ptr, "other")]


def test_engines_dropped_undrained_record_their_side_streams(monkeypatch):
    # an engine dropped before drain() lets its held tensors go only once its side streams
    # (stood in for) have passed what is queued there; after a drain nothing is recorded.
    # before: they went back to the allocator at once, under the moves still queued
    from ditron.engines.copy_engine import CopyEngine
    from ditron.engines.streams import SideLane

    records: list = []
    monkeypatch.setattr(torch.Tensor, "record_stream",
                        lambda self, s: records.append((self.data_ptr(), s.name)))
    held = [torch.randn(5), torch.randn(3)]
    ptrs = [x.data_ptr() for x in held]
    lane = SideLane(torch.device("cpu"), True)  # no side stream on the CPU: stand one in
    lane.side, lane._pending, lane._held = _Stream("side"), True, list(held)
    del lane
    gc.collect()
    assert records == [(p, "side") for p in ptrs]
    records.clear()
    engine = CopyEngine(lanes=2)
    engine._streams, engine._held = [_Stream("lane 0"), _Stream("lane 1")], list(held)
    del engine
    gc.collect()
    assert records == [(p, name) for p in ptrs for name in ("lane 0", "lane 1")]
    records.clear()
    lane = SideLane(torch.device("cpu"), True)
    lane.side, lane._pending, lane._held = _Stream("side"), False, []  # as drain() leaves it
    del lane
    gc.collect()
    assert records == []


def check_sm_tables_let_go(seed: int, n: int) -> tuple[list, list, list, list, bool]:
    """Pushes into four rows of the peer's box (four tables) with a cache of two, the
    first one issued as if a CUDA graph captured it, then row 1 again, all launched on a
    stand-in stream "s" that is not the tables' allocation stream. Returns the record
    log after the evictions and after the engine is dropped, the tables' addresses (0, 1,
    2, 3, 1 again), the addresses the engine pins, and whether every push landed."""
    sm = importlib.import_module("ditron.engines.sm")
    records = _log_records()
    sm._CACHE_LIMIT = 2
    sm.launch_stream = lambda lane, device: 7  # the raw handle of stream "s"
    torch.cuda.current_stream = lambda device=None: _Stream("s")
    graph = {"capturing": False}
    sm.capturing = lambda: graph["capturing"]
    w = ditron.world()
    me, peer = w.rank, 1 - w.rank
    pad = ditron.signal_pad("test_sm_tables_let_go", 1)
    box = ditron.empty((4, n), torch.float32)
    engine = get_engine("sm", programs=2, block=64)
    ptrs, landed = [], True
    for step, row in enumerate((0, 1, 2, 3, 1)):
        box.fill_(float("nan"))
        ditron.barrier()
        graph["capturing"] = step == 0
        epoch = pad.next_epoch()
        mine = _payload(seed, step, me, n)
        engine.issue([Transfer(mine, box[row], me, peer, Signal(pad, 0, epoch))])
        wait_slots(pad, 0, range(0, 1), epoch)
        engine.drain()
        ptrs.append(next(reversed(engine._tables.values()))[0].data_ptr())
        landed &= torch.equal(box[row], _payload(seed, step, peer, n))
        landed &= bool(box[[r for r in range(4) if r != row]].isnan().all())
        ditron.barrier()
    evicted = list(records)
    pinned = [k.tensor.data_ptr() for k in getattr(engine, "_pinned", {}).values()]
    del engine
    gc.collect()
    return evicted, records[len(evicted):], ptrs, pinned, landed


def test_sm_engine_tables_let_go_record_the_streams_that_read_them():
    # before: an evicted table's memory went back to its allocation stream's pool at once
    # (no record): on a GPU the next allocation there took it while a launch on the
    # concurrent engine's side stream (or on another issuing stream) still read it; and a
    # table a CUDA graph had captured was freed under the graph
    seed = int(torch.randint(0, 1 << 20, ()))
    got = ditron.launch(check_sm_tables_let_go, 2, seed, 200, backend="cpu")
    for evicted, dropped, ptrs, pinned, landed in got:
        assert landed
        assert pinned == [ptrs[0]]  # captured: kept past its eviction
        # issuing row 2 evicted table 0 (pinned: nothing recorded), row 3 table 1, row 1
        # again (a new table 1) table 2; each recorded before its memory went back
        assert evicted == [(ptrs[1], "s"), (ptrs[2], "s")]
        # the engine dropped: the cached tables 3 and 1 (new) and the pinned table 0
        assert sorted(dropped) == sorted((p, "s") for p in (ptrs[3], ptrs[4], ptrs[0]))


def check_tma_counter(seed: int, n: int) -> tuple[list, list, bool]:
    """A tma engine made on stand-in stream "a", issued on "b" then "a": what each issue
    waited for, the record log once the engine is dropped (with the counter's address),
    and whether the pushes landed."""
    tma = importlib.import_module("ditron.engines.tma")
    records = _log_records()
    log: list = []
    current = {"name": "a"}
    streams = {name: _Stream(name, log) for name in "ab"}
    torch.cuda.current_stream = lambda device=None: streams[current["name"]]
    torch._C._cuda_getCurrentRawStream = lambda device: 100 + ord(current["name"])
    stream_order.capturing = lambda: False
    # the engine's order and launch stream as on a GPU
    tma.StreamOrder = lambda device: stream_order.StreamOrder(torch.device("cuda", 0))
    tma.launch_stream = lambda lane, device: 100 + ord(current["name"])
    w = ditron.world()
    me, peer = w.rank, 1 - w.rank
    pad = ditron.signal_pad("test_tma_counter", 1)
    box = ditron.empty((n,), torch.float32)
    engine = get_engine("tma", programs=2, block_rows=2)  # made (and zeroed) on "a"
    waits, landed = [], True
    for step, name in enumerate("ba"):
        box.fill_(float("nan"))
        ditron.barrier()
        current["name"] = name
        before = len(log)
        epoch = pad.next_epoch()
        engine.issue([Transfer(_payload(seed, step, me, n), box, me, peer,
                               Signal(pad, 0, epoch))])
        wait_slots(pad, 0, range(0, 1), epoch)
        engine.drain()
        waits.append(log[before:])
        landed &= torch.equal(box, _payload(seed, step, peer, n))
        ditron.barrier()
    counter = getattr(engine._counter, "tensor", engine._counter).data_ptr()
    del engine
    gc.collect()
    return waits, [(p == counter, s) for p, s in records], landed


def test_tma_engine_counter_follows_its_zeroing_and_outlives_its_launches():
    # before: the counter was zeroed by a synchronous copy (the host waited for everything
    # queued on the current stream, once per new engine); its first issue then followed no
    # stream, and once the engine was dropped the counter's memory went back to its
    # allocation stream's pool while a launch on another stream might still count in it
    seed = int(torch.randint(0, 1 << 20, ()))
    got = ditron.launch(check_tma_counter, 2, seed, 300, backend="cpu")
    for waits, records, landed in got:
        assert landed
        # the first issue, on "b", waits for "a" (which zeroed the counter); then "a" for "b"
        assert waits == [[("b", "a")], [("a", "b")]]
        # both launch streams, "b" first (a host tensor has no allocation stream; on a GPU
        # "a", which allocated it, needs no record: the allocator orders reuse there)
        assert records == [(True, "b"), (True, "a")]


# -- on a GPU ---------------------------------------------------------------------------------


def check_evicted_table_memory(n: int) -> tuple[bool, bool, bool]:
    """A concurrent sm engine (cache of one table) whose side stream is busy: a push into
    row 0 (table A, read on the side stream once it is free), then one into row 1 (table
    B evicts A). Returns whether an allocation of A's size on the issuing stream took A's
    memory, whether the side stream was still busy then (so it had yet to read A), and
    whether both pushes landed."""
    sm = importlib.import_module("ditron.engines.sm")
    sm._CACHE_LIMIT = 1
    w = ditron.world()
    me = w.rank
    engine = get_engine("sm", concurrent=True)
    box = ditron.empty((3, n), torch.float32)
    box.fill_(float("nan"))
    src = [torch.randn(n, device=w.device) for _ in range(3)]
    engine.issue([Transfer(src[2], box[2], me, me)])  # compiles the kernel before the sleep
    engine.drain()
    torch.cuda.synchronize()
    with torch.cuda.stream(engine._lane.side):
        torch.cuda._sleep(4_000_000_000)  # the side stream busy for about two seconds
    engine.issue([Transfer(src[0], box[0], me, me)])
    desc = next(iter(engine._tables.values()))[0]
    ptr, nbytes = desc.data_ptr(), desc.numel() * 8 * 8 // 7
    del desc
    engine.issue([Transfer(src[1], box[1], me, me)])  # evicts table A
    grabbed = torch.empty(nbytes // 8, dtype=torch.int64, device=w.device)
    busy = not engine._lane.side.query()
    reused = grabbed.data_ptr() == ptr
    engine.drain()
    torch.cuda.synchronize()
    return reused, busy, all(torch.equal(box[i], src[i]) for i in range(3))


def check_evicted_table_memory_unrecorded(n: int) -> tuple[bool, bool, bool]:
    """:func:`check_evicted_table_memory` with ``Kept`` recording no stream (the code
    before): shows the check can see a reuse."""
    streams = importlib.import_module("ditron.engines.streams")
    streams.Kept.__del__ = lambda self: None
    return check_evicted_table_memory(n)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_sm_engine_evicted_table_waits_for_its_side_stream_cuda():
    # before: table A went back to the issuing stream's pool at its eviction, and the next
    # allocation there took it while the side stream's launch had yet to read it
    assert ditron.launch(check_evicted_table_memory, 1, 4096, backend="cuda") == [
        (False, True, True)]
    # the same check on the old behaviour sees the reuse
    assert ditron.launch(check_evicted_table_memory_unrecorded, 1, 4096,
                         backend="cuda") == [(True, True, True)]


def check_tma_made_without_blocking(concurrent: bool, n: int) -> tuple[float, bool]:
    """Seconds the host spent making a tma engine while the current stream sleeps about a
    second, and whether a push made right after lands."""
    w = ditron.world()
    me = w.rank
    box = ditron.empty((n,), torch.float32)
    box.fill_(float("nan"))
    src = torch.randn(n, device=w.device)
    get_engine("tma", concurrent=concurrent)  # first: streams, device properties
    torch.cuda.synchronize()
    torch.cuda._sleep(2_000_000_000)
    start = time.monotonic()
    engine = get_engine("tma", concurrent=concurrent)
    made = time.monotonic() - start
    engine.issue([Transfer(src, box, me, me)])
    engine.drain()
    torch.cuda.synchronize()
    return made, torch.equal(box, src)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available()
                    or torch.cuda.get_device_capability()[0] < 9, reason="needs a Hopper GPU")
@pytest.mark.parametrize("concurrent", [False, True])
def test_tma_engine_made_without_blocking_the_host_cuda(concurrent):
    # before: the counter's synchronous copy waited for the current stream's sleep
    [(made, landed)] = ditron.launch(check_tma_made_without_blocking, 1, concurrent,
                                     100_003, backend="cuda")
    assert landed and made < 0.3, made
