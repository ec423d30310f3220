"""Generated megakernel modules are let go of with the last megakernel holding them: a
process building and freeing (or dropping) megakernels of ever new sources does not grow
(``sys.modules``, ``linecache``, the interpreter's rewrites, codegen's own table), while
megakernels alive share one module and keep running when another one of it is freed."""

from __future__ import annotations

import gc
import linecache
import sys
import weakref

import torch
import triton
import triton.language as tl

import ditron
from ditron import task as dt
from ditron.task import codegen


@triton.jit
def _triple_tile(tile, x, n, BLOCK: tl.constexpr):
    offs = tile * BLOCK + tl.arange(0, BLOCK)
    tl.store(x + offs, tl.load(x + offs, mask=offs < n) * 3, mask=offs < n)


def _kept() -> tuple[int, ...]:
    """What the process keeps of generated modules, by kind."""
    from triton.runtime.interpreter import InterpretedFunction

    gc.collect()
    return (len(codegen._MODULES),
            sum(name.startswith("ditron_megakernel_") for name in sys.modules),
            sum(fn.__module__.startswith("ditron_megakernel_")
                for fn in InterpretedFunction.rewritten_fn),
            sum("megakernels" in path for path in linecache.cache))


def _graph(x: torch.Tensor, tasks: int) -> dt.TaskGraph:
    """``tasks`` tasks each tripling ``x`` (a source of its own per task count)."""
    g = dt.TaskGraph("released")
    for k in range(tasks):
        g.add(f"t{k}", _triple_tile, x, x.numel(), 8, tiles=-(-x.numel() // 8),
              writes=lambda t, r: dt.region(x, (8 * t, 8 * t + 8)))
    return g


def _released_case(n: int) -> list:
    dev = ditron.world().device
    x = torch.empty(12, device=dev)
    before = _kept()
    kept, values, collected = [], [], []
    for i in range(n):
        x.copy_(torch.randn(12))
        ref = x * 3 ** (i + 1)
        mk = _graph(x, i + 1).compile()
        mk()
        values.append(bool(torch.allclose(x, ref)))
        gone = weakref.ref(mk)
        if i % 2:
            del mk  # dropped without free: its finalizer lets go of the module
        else:
            mk.free()
            del mk
        kept.append(_kept())
        collected.append(gone() is None)
    # megakernels alive share a module; freeing one leaves it to the other
    a, b = _graph(x, 2).compile(), _graph(x, 2).compile()
    shared = codegen.load(a.tasks) is codegen.load(b.tasks)
    a.free()
    x.copy_(torch.randn(12))
    ref = x * 9
    b()
    values.append(bool(torch.allclose(x, ref)))
    b.free()
    return [before, kept, values, collected, shared, _kept()]


def test_freed_megakernels_leave_no_modules(backend):
    # before: every megakernel's module stayed in codegen's table and sys.modules, its
    # kernels' rewrites in the interpreter's cache and its lines in linecache, for the life
    # of the process (3 megakernels of 3 sources: 3 of each)
    before, kept, values, collected, shared, after = ditron.launch(
        _released_case, 1, 3, backend=backend)[0]
    assert all(values), values
    assert all(collected), collected
    assert kept == [before] * len(kept), (before, kept)
    assert shared
    assert after == before, (before, after)
