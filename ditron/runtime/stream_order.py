"""Uses of one piece of collective state follow each other in one stream order per rank.

A signal pad's epochs, a workspace's buffers and a fused collective's device epochs are
shared by every call that uses them: two calls issued from different CUDA streams of one
rank, with nothing ordering the streams, could run at once on the device (one call's
signals satisfying the other's waits, both bumping one device epoch, one overwriting the
buffer the other still reads). NCCL orders the calls of one communicator the same way, on
its own stream. A :class:`StreamOrder` makes a use issued on another stream than the
previous use's first wait, in stream order, for everything queued on that stream so far.

Uses captured into a CUDA graph are not ordered here (a capture may not wait for work
outside it); a graph's replays follow each other and eager calls in the order the user's
streams give them, as for NCCL calls in graphs. An eager call that ``ops/replays.py`` runs
as a replay is an eager call all the same: :func:`recording` collects the orders its
capture used, and each replay follows them on its stream first.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch

from .cuda_graphs import capturing

#: the orders followed inside :func:`recording` (``None``: not recording)
_followed: list[StreamOrder] | None = None


@contextlib.contextmanager
def recording() -> Iterator[list[StreamOrder]]:
    """Collect, in a list, the orders that uses inside the block follow (captured ones
    too, which do not wait): what a replay of a graph captured there must follow."""
    global _followed
    outer, _followed = _followed, []
    try:
        yield _followed
    finally:
        if outer is not None:
            outer.extend(_followed)
        _followed = outer


class StreamOrder:
    """The stream of the previous use of one piece of state (CUDA; a no-op on the CPU
    backend, whose ranks run one launch at a time)."""

    __slots__ = ("_device", "_raw", "_stream")

    def __init__(self, device: torch.device) -> None:
        self._device = device.index if device.type == "cuda" else None
        self._raw: int | None = None  # the previous use's stream handle
        self._stream: torch.cuda.Stream | None = None  # ... kept alive for the wait

    def follow(self) -> None:
        """Order this use after the previous one: if that was issued on another stream,
        the current stream waits for everything queued there so far. The hot path (the
        same stream again) is one query of the current stream's handle."""
        if _followed is not None:
            _followed.append(self)
        if self._device is None:
            return
        raw = torch._C._cuda_getCurrentRawStream(self._device)
        if raw == self._raw or capturing():
            return
        stream = torch.cuda.current_stream(self._device)
        if self._stream is not None:
            stream.wait_stream(self._stream)
        self._raw, self._stream = raw, stream

    def inherit(self, other: StreamOrder) -> None:
        """Continue ``other``'s order (state that replaces ``other``'s, e.g. a grown pad,
        follows the last use of what it replaces)."""
        if other._raw is not None and self._raw is None:
            self._raw, self._stream = other._raw, other._stream
