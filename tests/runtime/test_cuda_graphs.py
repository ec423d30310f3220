"""``runtime/cuda_graphs.py`` on the CPU backend: ``ditron.ops.graph_safe()`` in a process
with several worlds (the warm-up holds for the ops of every world, as a capture does), and
``capture`` refused before its warm-up."""

from __future__ import annotations

import pytest
import torch

import ditron
from ditron.ops.graphs import graph_mode
from ditron.runtime.world import current


def _graph_pads() -> int:
    """The signal pads with a device epoch of the current world: what the graph-safe
    variants use, and what a capture needs a warm-up to have made (``graphs.require_warm``)."""
    return sum(isinstance(k, tuple) and k[0] == "signal_pad" and v.has_device_epoch
               for k, v in current().cache.items())


def check_warm_up_in_another_world() -> list[bool]:
    """A world of one rank (from launch) is current when the block is entered; the op runs
    in the world of both ranks (``ditron.use``). Before, the block counted in the world
    current at its entry only: the pair's copy-engine all-gather took its eager path and
    made no pad with a device epoch, and a capture after such a warm-up raised "no
    graph-safe workspace ... run the op once inside graph_safe"."""
    alone = ditron.world()
    pair = ditron.init(group=[0, 1])
    me = pair.rank
    xs = [torch.randn(37, generator=torch.Generator().manual_seed(70 + r)) for r in range(2)]
    seen = []
    with ditron.use(alone), ditron.ops.graph_safe():
        seen.append(graph_mode())
        with ditron.use(pair):
            seen.append(graph_mode())
            got = ditron.ops.all_gather(xs[me].to(pair.device), engine="copy_engine")
            seen.append(_graph_pads() > 0)
        seen.append(graph_mode())
    assert torch.equal(got.cpu(), torch.cat(xs))
    with ditron.use(pair):
        seen.append(not graph_mode())  # the block ended
        with pytest.raises(ZeroDivisionError), ditron.ops.graph_safe():
            raise ZeroDivisionError
        seen.append(not graph_mode())  # and ends when its body raises
    return seen


def test_graph_safe_holds_in_every_world(backend):
    assert ditron.launch(check_warm_up_in_another_world, 2, backend=backend,
                         groups=[[0], [1]]) == [[True] * 6] * 2


def check_capture_on_cpu() -> list[str]:
    """``graphs.capture`` in a world of the CPU backend raises, naming the backend, before
    its warm-up runs ``fn``. Before, the warm-up ran (a collective call) and then
    ``torch.cuda.synchronize`` failed with torch's "Torch not compiled with CUDA enabled"
    (or, on a host with GPUs, a forked rank's CUDA initialisation error)."""
    from ditron.ops.graphs import capture

    calls = []
    with pytest.raises(RuntimeError, match="CUDA graphs need the cuda backend; this world "
                                           "runs on 'cpu'"):
        capture(lambda: calls.append(ditron.ops.all_reduce(torch.ones(3))), 2)
    return [f"{len(calls)} calls"]


def test_capture_refused_on_the_cpu_backend():
    assert ditron.launch(check_capture_on_cpu, 2, backend="cpu") == [["0 calls"]] * 2
