"""A megakernel keeps the tasks its graph had when compiled: tasks added to the graph, or
the graph's list changed, afterwards change neither what it runs nor how it names its
tiles (its repr, its trace's labels)."""

from __future__ import annotations

import torch
import triton
import triton.language as tl

import ditron
from ditron import task as dt


@triton.jit
def _add_tile(tile, x, c, BLOCK: tl.constexpr):
    offs = tile * BLOCK + tl.arange(0, BLOCK)
    tl.store(x + offs, tl.load(x + offs) + c)


def _changed_case() -> list:
    dev = ditron.world().device
    x = torch.randn(32, device=dev)
    rows = lambda t, r: dt.region(x, (16 * t, 16 * t + 16))  # noqa: E731
    g = dt.TaskGraph("changed")
    g.add("one", _add_tile, x, 1.0, 16, tiles=2, reads=rows, writes=rows)
    g.add("ten", _add_tile, x, 10.0, 16, tiles=2, reads=rows, writes=rows)
    mk = g.compile(trace=True)
    g.add("hundred", _add_tile, x, 100.0, 16, tiles=2, reads=rows, writes=rows)
    g.tasks.reverse()  # the graph's list is the caller's to change
    ditron.trace.clear()
    start = x.clone()
    mk()
    call = next(e for e in ditron.trace.events() if e["name"] == "megakernel changed call")
    labels = {name: t["tiles"] for name, t in call["args"]["tasks"].items()}
    return [repr(mk), (x - start - 11.0).abs().max().item(), labels,
            [t.name for t in mk.tasks]]


def test_a_megakernel_keeps_the_tasks_it_was_compiled_with(backend):
    got = ditron.launch(_changed_case, 1, backend=backend)[0]
    assert got[0].startswith("Megakernel('changed': 2 tasks, 4 tiles"), got[0]
    assert got[1] <= 1e-5  # it ran the two tasks it was compiled with
    assert got[2] == {"one": 2, "ten": 2}, got[2]  # and named them so in its trace
    assert got[3] == ["one", "ten"]
