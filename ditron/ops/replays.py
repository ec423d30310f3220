"""Eager calls replayed from CUDA graphs: the device's pace without the host's cost per step.

An eager copy-engine exchange issues a dozen or more driver calls per call, a fused kernel
call a Triton launch and its Python around it; each costs microseconds of host time, and on
the hosts we measured the graph-safe exchange's finer chunks and extra streams cost more
host time than they save on the device (``docs/perf.md``, session 22). Under a CUDA graph
the same steps cost one launch. So an eager call whose inputs and outputs are fixed
addresses (a given ``out``) can run as the replay of a graph that captured one graph-safe
call (``ops/collectives.py``: the copy engine's chunked exchange or the fused kernel) on
exactly those addresses:

* the first call on a key (op, shapes, dtype, addresses) runs the graph-safe variant
  uncaptured (it also makes its workspace, collectively, as a warm-up does);
* the second captures it in a graph of its own and replays that graph; later ones replay.

Every call, captured or not, runs the graph-safe protocol once, so ranks whose caches
differ (one reuses its ``out``, another does not) stay in step: the fused kernel's epochs
live on the device; the exchange's calls take turns over the two halves of its inbox by a
count on the host that every rank advances alike (``exchange.next_turn``, part of the key),
with the readers' acknowledgement implied by the previous call's data, so a replay starts
pushing without a handshake. As eager calls, replays follow the other calls on the state
they share in stream order (``runtime/stream_order.py``): a replay issued on another
stream than the previous use of its workspaces and pads first waits for that stream, and
later uses on other streams wait for it. A replay reads and
writes the addresses it was captured with; the key holds them, so a replay only runs for
tensors at those addresses with that shape, dtype and strides.

Graphs are kept per world of the process, the ``MAX_GRAPHS`` most recently used (env
``DITRON_REPLAY_GRAPHS``); ``release()`` drops them (as
``ditron.ops.collectives.release_workspaces`` does). A key whose graph was dropped to make
room, or whose capture raised, is not captured again: it runs uncaptured from then on. So
a working set larger than the cache (more ``out`` buffers in a step than ``MAX_GRAPHS``)
costs at most one capture per key, never a capture per call.
"""

from __future__ import annotations

import collections
from collections.abc import Callable

import torch

from ..runtime import stream_order
from ..runtime.config import env_flag, env_int
from ..runtime.world import current
from .graphs import graph_safe

#: eager calls may replay captured graphs (env ``DITRON_REPLAY``: 0 turns it off)
ENABLED = env_flag("DITRON_REPLAY", True)
MAX_GRAPHS = env_int("DITRON_REPLAY_GRAPHS", 0) or 16
_CACHE = "ops:replays"


class _Cache:
    """Keys seen once (no graph yet), the captured graphs (least recently used first, each
    with the stream orders its capture used) and the keys whose graphs were dropped;
    :meth:`step` is the policy of :func:`run`."""

    def __init__(self, max_graphs: int) -> None:
        self.max_graphs = max_graphs
        self.seen: collections.OrderedDict[tuple, None] = collections.OrderedDict()
        self.graphs: collections.OrderedDict[tuple, object] = collections.OrderedDict()
        self.dropped: collections.OrderedDict[tuple, None] = collections.OrderedDict()

    def step(self, key: tuple) -> str:
        """What the call on ``key`` does: ``"replay"`` its graph, ``"capture"`` one (the
        second call on a key), or run ``"eager"`` (uncaptured: the first call, or a key
        whose graph was dropped)."""
        if key in self.graphs:
            self.graphs.move_to_end(key)
            return "replay"
        if key in self.dropped:
            self.dropped.move_to_end(key)
            return "eager"
        if key not in self.seen:
            _remember(self.seen, key, 4 * self.max_graphs)
            return "eager"
        del self.seen[key]
        return "capture"

    def failed(self, key: tuple) -> None:
        """The capture of ``key`` raised: it runs uncaptured from then on (not captured
        again, and again raising, on every second call)."""
        _remember(self.dropped, key, 64 * self.max_graphs)

    def add(self, key: tuple, graph: object) -> None:
        """Keep ``graph`` for ``key``, dropping the least recently used one beyond
        ``max_graphs`` (its key is then never captured again)."""
        self.graphs[key] = graph
        if len(self.graphs) > self.max_graphs:
            old, _ = self.graphs.popitem(last=False)
            _remember(self.dropped, old, 64 * self.max_graphs)


def _remember(keys: collections.OrderedDict, key: tuple, most: int) -> None:
    keys[key] = None
    if len(keys) > most:
        keys.popitem(last=False)


def _cache() -> _Cache:
    return current().cache.setdefault(_CACHE, _Cache(MAX_GRAPHS))


def key_of(*tensors: torch.Tensor) -> tuple:
    """What a graph captured on ``tensors`` depends on: address, shape, strides and dtype
    of each."""
    return tuple((t.data_ptr(), tuple(t.shape), t.stride(), t.dtype) for t in tensors)


def run(key: tuple, fn: Callable[[], object]) -> str:
    """Run ``fn`` (one graph-safe call on fixed addresses, every rank calling ``run`` for the
    same calls) uncaptured, by capturing it, or by replaying its graph, as the module
    docstring says; returns which (``"eager"``, ``"captured"``, ``"replayed"``)."""
    cache = _cache()
    what = cache.step(key)
    if what == "replay":
        graph, orders = cache.graphs[key]
        _follow(orders)
        graph.replay()
        return "replayed"
    if what == "eager":
        with graph_safe():
            fn()
        return "eager"
    graph = torch.cuda.CUDAGraph()
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream), stream_order.recording() as followed:
        graph.capture_begin(capture_error_mode="thread_local")
        try:
            fn()
        except BaseException:
            cache.failed(key)
            try:  # end the capture; the call's own error is the one to report
                graph.capture_end()
            except Exception:
                pass
            raise
        graph.capture_end()
    torch.cuda.current_stream().wait_stream(stream)
    orders = tuple(dict.fromkeys(followed))  # each once, in order
    cache.add(key, (graph, orders))
    _follow(orders)
    graph.replay()
    return "captured"


def _follow(orders: tuple[stream_order.StreamOrder, ...]) -> None:
    """Order a replay on the current stream after the previous uses of the state its
    graph uses (what the captured call followed, uncaptured), and later uses after it."""
    for order in orders:
        order.follow()


def release() -> None:
    """Drop every cached graph (their memory pools with them)."""
    current().cache.pop(_CACHE, None)


__all__ = ["ENABLED", "MAX_GRAPHS", "key_of", "release", "run"]
