"""The ``sm`` and ``tma`` engines' launches on the issuing stream share the engine's
counters (a transfer's last program is the one that counts the others out), so one engine's
issues follow one stream order per rank (``runtime/stream_order.py``): an issue on another
stream than the previous one first waits for it. CUDA's stream queries are stood in for
on the CPU backend, as in ``tests/runtime/test_stream_order_rules.py``; the transfers
still move and are checked against their payloads."""

from __future__ import annotations

import importlib

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

import ditron
from ditron.engines import Signal, Transfer, get_engine
from ditron.engines.sync import wait_slots
from ditron.runtime import stream_order

ENGINES = (("sm", {"programs": 3, "block": 64}), ("tma", {"programs": 2, "block_rows": 2}))


class _Stream:
    """Stands in for ``torch.cuda.Stream``: logs the streams it waits for."""

    def __init__(self, name: str, log: list) -> None:
        self.name, self.log = name, log

    def wait_stream(self, other: _Stream) -> None:
        self.log.append((self.name, other.name))


def _stand_in(log: list) -> dict:
    """Installs stand-ins for the current stream (``state["current"]`` names it) and the
    capture state that ``StreamOrder`` reads (a launched rank's process only)."""
    state = {"current": "a"}
    streams = {n: _Stream(n, log) for n in "ab"}
    torch.cuda.current_stream = lambda device=None: streams[state["current"]]
    torch._C._cuda_getCurrentRawStream = lambda device: hash(state["current"])
    stream_order.capturing = lambda: False
    return state


def _payload(step: int, rank: int, n: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(100 * step + rank)
    return torch.randn(n, generator=g)


def check_issues_follow_one_order(name: str, options: dict, n: int) -> list:
    """Pushes of the same buffers (one cached table, one set of counters) issued on stream
    a, a, b, a, b: what each issue waited for, and whether each push landed."""
    w = ditron.world()
    me, right, left = w.rank, (w.rank + 1) % w.world_size, (w.rank - 1) % w.world_size
    log: list = []
    state = _stand_in(log)
    # the engine's order as on a GPU (the pads' stay the CPU backend's: they order nothing)
    module = importlib.import_module(f"ditron.engines.{name}")
    module.StreamOrder = lambda device: stream_order.StreamOrder(torch.device("cuda", 0))
    engine = get_engine(name, **options)
    pad = ditron.signal_pad(f"test_engine_stream_order:{name}", 1)
    box = ditron.zeros((n,), torch.float32)
    src = torch.empty(n)
    got = []
    for step, stream in enumerate("aabab"):
        box.fill_(float("nan"))
        src.copy_(_payload(step, me, n))
        ditron.barrier()
        state["current"] = stream
        before = len(log)
        epoch = pad.next_epoch()
        engine.issue([Transfer(src, box, me, right, Signal(pad, 0, epoch))])
        wait_slots(pad, 0, range(0, 1), epoch)
        engine.drain()
        got.append((stream, log[before:], torch.equal(box, _payload(step, left, n))))
        ditron.barrier()
    return got


@pytest.mark.parametrize("name,options", ENGINES)
def test_issues_on_another_stream_wait_for_the_previous_one(name, options):
    # before: nothing ordered them; on a GPU two launches on unordered streams ran at once
    # and counted each other's programs in the shared counters (a signal raised before its
    # data landed, or never: the counter reset under the other launch)
    got = ditron.launch(check_issues_follow_one_order, 2, name, options, 300, backend="cpu")
    expected = [("a", [], True), ("a", [], True), ("b", [("b", "a")], True),
                ("a", [("a", "b")], True), ("b", [("b", "a")], True)]
    assert got == [expected] * 2


class _Ops(TorchDispatchMode):
    """Records the name of every torch operation run inside it."""

    def __init__(self) -> None:
        super().__init__()
        self.names: list[str] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.names.append(str(func))
        return func(*args, **(kwargs or {}))


#: operations that queue a kernel writing device memory on the issuing stream
_FILLS = ("aten.zeros", "aten.zero_", "aten.fill_", "aten.full", "aten.ones")


def check_state_is_copied(name: str, options: dict) -> tuple[list[str], bool]:
    """The torch operations that making the engine and its first issue (a new table) run,
    and whether the push landed."""
    me = ditron.world().rank
    box = ditron.zeros((300,), torch.float32)
    src = _payload(0, me, 300)
    with _Ops() as ops:
        engine = get_engine(name, **options)
        engine.issue([Transfer(src, box, me, me)])
        engine.drain()
    return [op for op in ops.names if op.startswith(_FILLS)], torch.equal(box, src)


@pytest.mark.parametrize("name,options", ENGINES)
def test_counters_start_zeroed_without_a_fill_on_the_issuing_stream(name, options):
    # before: a fill kernel on the issuing stream zeroed the counters; a concurrent engine's
    # side stream, started at a mark taken earlier (issue(..., since=)), could launch before
    # it ran and count from whatever the memory held. (The sm engine's tables are copied;
    # the tma engine's counter is filled on its launch stream on CUDA, which this CPU run
    # cannot see: tests/engines/test_engine_lifetimes.py)
    assert ditron.launch(check_state_is_copied, 1, name, options, backend="cpu") == [([], True)]
