"""Eager calls replayed from CUDA graphs (``ops/replays.py``) keep the stream order of the
state they share with other calls (``runtime/stream_order.py``), with CUDA's streams,
graphs and capture state stood in for on the CPU backend (the GPU test of the ordering of
calls that are not replayed: ``tests/ops/test_stream_order.py``)."""

from __future__ import annotations

import contextlib

import torch

import ditron


class _Stream:
    """Stands in for ``torch.cuda.Stream``: records the streams it waits for."""

    def __init__(self, name: str, waits: list) -> None:
        self.name, self.waits = name, waits

    def wait_stream(self, other: _Stream) -> None:
        self.waits.append((self.name, other.name))


class _Device:
    """The current stream, the capture state and CUDA graphs that ``replays.run`` and
    ``StreamOrder`` use, and a log of what ran on which stream."""

    def __init__(self) -> None:
        from ditron.runtime import stream_order

        self.log: list = []
        self.streams = {n: _Stream(n, self.log) for n in ("a", "b", "capture")}
        self.current, self.capturing = "a", False
        device = self

        class Graph:
            def capture_begin(self, capture_error_mode: str) -> None:
                device.capturing = True

            def capture_end(self) -> None:
                device.capturing = False

            def replay(self) -> None:
                device.log.append(("replay on", device.current))

        @contextlib.contextmanager
        def on(stream: _Stream):
            before, self.current = self.current, stream.name
            try:
                yield
            finally:
                self.current = before

        torch.cuda.current_stream = lambda device=None: self.streams[self.current]
        torch._C._cuda_getCurrentRawStream = lambda device: hash(self.current)
        torch.cuda.Stream = lambda *a, **k: self.streams["capture"]
        torch.cuda.stream = on
        torch.cuda.CUDAGraph = Graph
        stream_order.capturing = lambda: self.capturing


def check_replays_follow_stream_order() -> list:
    """A fused-collective-like call (its workspace's order followed inside the call, as
    ``fused_launch.run`` does) on fixed addresses: uncaptured on stream a, captured and
    replayed on stream b, replayed on a, then an uncaptured call of the same workspace on
    b. Before, the replays followed nothing: the one on b ran beside a's call (both
    bumping the workspace's device epochs), and the later call on b, which found b as
    the last use, did not wait for the replay on a."""
    from ditron.ops import replays
    from ditron.ops.workspaces import follow_previous_use

    dev = _Device()
    cuda = torch.device("cuda", 0)

    def call() -> None:  # what a graph-safe call does on the host
        follow_previous_use("test.replay_order", cuda)
        dev.log.append(("captured" if dev.capturing else "ran", dev.current))

    steps = []
    for stream in ("a", "b", "a"):
        dev.current = stream
        steps.append(replays.run(("test.replay_order",), call))
    dev.current = "b"
    call()  # the same workspace without a replay (another out, or none)
    return steps + [e for e in dev.log if "capture" not in e]


def test_replays_follow_the_stream_order_of_their_state():
    got = ditron.launch(check_replays_follow_stream_order, 1, backend="cpu")[0]
    assert got == ["eager", "captured", "replayed",
                   ("ran", "a"),
                   ("b", "a"), ("replay on", "b"),  # b waits for a's call, then replays
                   ("a", "b"), ("replay on", "a"),
                   ("b", "a"), ("ran", "b")]
