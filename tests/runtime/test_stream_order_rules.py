"""``runtime.stream_order.StreamOrder``'s rules, with CUDA's stream queries stood in for
(the GPU test of the ordering itself: ``tests/ops/test_stream_order.py``): a use on the
previous use's stream waits for nothing, one on another stream waits for that one, a
capture neither waits nor moves the order, a replaced piece of state inherits it, and the
CPU backend does nothing."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from ditron.runtime import stream_order


@dataclasses.dataclass
class _Stream:
    handle: int
    waited_for: list[int] = dataclasses.field(default_factory=list)

    def wait_stream(self, other: _Stream) -> None:
        self.waited_for.append(other.handle)


class _Device:
    """The current stream and capture state that ``StreamOrder`` reads."""

    def __init__(self, monkeypatch) -> None:
        self.streams = {h: _Stream(h) for h in (1, 2, 3)}
        self.current = 1
        self.capturing = False
        monkeypatch.setattr(torch._C, "_cuda_getCurrentRawStream",
                            lambda device: self.streams[self.current].handle, raising=False)
        monkeypatch.setattr(torch.cuda, "current_stream",
                            lambda device=None: self.streams[self.current])
        monkeypatch.setattr(stream_order, "capturing", lambda: self.capturing)

    def waits(self) -> dict[int, list[int]]:
        return {h: s.waited_for for h, s in self.streams.items() if s.waited_for}


@pytest.fixture
def device(monkeypatch) -> _Device:
    return _Device(monkeypatch)


def test_a_use_on_another_stream_waits_for_the_previous_one(device):
    order = stream_order.StreamOrder(torch.device("cuda", 0))
    order.follow()  # the first use: nothing to wait for
    order.follow()  # the same stream again
    assert device.waits() == {}
    device.current = 2
    order.follow()
    assert device.waits() == {2: [1]}
    order.follow()  # stream 2 again: in order already
    device.current = 3
    order.follow()
    device.current = 1
    order.follow()
    assert device.waits() == {2: [1], 3: [2], 1: [3]}


def test_a_capture_neither_waits_nor_moves_the_order(device):
    order = stream_order.StreamOrder(torch.device("cuda", 0))
    order.follow()
    device.current, device.capturing = 2, True
    order.follow()  # a capture may not wait for work outside it
    assert device.waits() == {}
    device.current, device.capturing = 3, False
    order.follow()  # follows the last eager use (stream 1), not the capture's stream
    assert device.waits() == {3: [1]}


def test_replacing_state_inherits_its_order(device):
    old = stream_order.StreamOrder(torch.device("cuda", 0))
    device.current = 2
    old.follow()
    new = stream_order.StreamOrder(torch.device("cuda", 0))
    new.inherit(old)
    device.current = 1
    new.follow()
    assert device.waits() == {1: [2]}
    fresh = stream_order.StreamOrder(torch.device("cuda", 0))
    fresh.follow()
    fresh.inherit(old)  # a used order keeps its own
    device.current = 3
    fresh.follow()
    assert device.waits() == {1: [2], 3: [1]}


def test_the_cpu_backend_orders_nothing(monkeypatch):
    def query(device):
        raise AssertionError("a CPU order asked CUDA for its stream")

    monkeypatch.setattr(torch._C, "_cuda_getCurrentRawStream", query, raising=False)
    order = stream_order.StreamOrder(torch.device("cpu"))
    order.follow()
    order.follow()
