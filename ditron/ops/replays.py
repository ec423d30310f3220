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
pushing without a handshake. A replay reads and
writes the addresses it was captured with; the key holds them, so a replay only runs for
tensors at those addresses with that shape, dtype and strides.

Graphs are kept per process, the ``MAX_GRAPHS`` most recently used (env
``DITRON_REPLAY_GRAPHS``); ``release()`` drops them (``ditron.release_workspaces`` does).
"""

from __future__ import annotations

import collections
import os
from collections.abc import Callable

import torch

from ..runtime.world import current
from .graphs import graph_safe

#: eager calls may replay captured graphs (env ``DITRON_REPLAY``: 0 turns it off)
ENABLED = os.environ.get("DITRON_REPLAY", "1") != "0"
MAX_GRAPHS = int(os.environ.get("DITRON_REPLAY_GRAPHS") or 16)
_CACHE = "ops:replays"


class _Cache:
    """Keys seen once (no graph yet) and the captured graphs, least recently used first."""

    def __init__(self) -> None:
        self.seen: collections.OrderedDict[tuple, None] = collections.OrderedDict()
        self.graphs: collections.OrderedDict[tuple, torch.cuda.CUDAGraph] = \
            collections.OrderedDict()


def _cache() -> _Cache:
    return current().cache.setdefault(_CACHE, _Cache())


def key_of(*tensors: torch.Tensor) -> tuple:
    """What a graph captured on ``tensors`` depends on: address, shape, strides and dtype
    of each."""
    return tuple((t.data_ptr(), tuple(t.shape), t.stride(), t.dtype) for t in tensors)


def run(key: tuple, fn: Callable[[], object]) -> str:
    """Run ``fn`` (one graph-safe call on fixed addresses, every rank calling ``run`` for the
    same calls) uncaptured, by capturing it, or by replaying its graph, as the module
    docstring says; returns which (``"eager"``, ``"captured"``, ``"replayed"``)."""
    cache = _cache()
    graph = cache.graphs.get(key)
    if graph is not None:
        cache.graphs.move_to_end(key)
        graph.replay()
        return "replayed"
    if key not in cache.seen:
        cache.seen[key] = None
        if len(cache.seen) > 4 * MAX_GRAPHS:
            cache.seen.popitem(last=False)
        with graph_safe():
            fn()
        return "eager"
    del cache.seen[key]
    graph = torch.cuda.CUDAGraph()
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        graph.capture_begin(capture_error_mode="thread_local")
        try:
            fn()
        except BaseException:
            try:  # end the capture; the call's own error is the one to report
                graph.capture_end()
            except Exception:
                pass
            raise
        graph.capture_end()
    torch.cuda.current_stream().wait_stream(stream)
    cache.graphs[key] = graph
    if len(cache.graphs) > MAX_GRAPHS:
        cache.graphs.popitem(last=False)
    graph.replay()
    return "captured"


def release() -> None:
    """Drop every cached graph (their memory pools with them)."""
    current().cache.pop(_CACHE, None)


__all__ = ["ENABLED", "MAX_GRAPHS", "key_of", "release", "run"]
