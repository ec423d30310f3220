"""What a task's arguments may be: NumPy scalars are passed as Python numbers (Triton cannot
pass them: the first call failed), values no kernel takes are refused when the task is
added, and tuples are looked into (a tuple of TMA descriptors fences the async proxy, a
tuple's tensors must be on the world's device)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import triton
import triton.language as tl
from triton.tools.tensor_descriptor import TensorDescriptor

import ditron
from ditron import task as dt
from ditron.task import codegen


@triton.jit
def _axpb_tile(tile, x, y, n, a, b, BLOCK: tl.constexpr):
    offs = tile * BLOCK + tl.arange(0, BLOCK)
    tl.store(y + offs, tl.load(x + offs, mask=offs < n) * a + b, mask=offs < n)


@triton.jit
def _copy_pair_tile(tile, pair, BLOCK: tl.constexpr):
    offs = tile * BLOCK + tl.arange(0, BLOCK)
    tl.store(pair[1] + offs, tl.load(pair[0] + offs))


def _numpy_scalars_case() -> list[float]:
    """``n``, ``a``, ``b`` and ``BLOCK`` as NumPy scalars (sizes read from an array)."""
    dev = ditron.world().device
    n, block = 40, 16
    x = torch.randn(n, device=dev)
    y = torch.full((n,), float("nan"), device=dev)
    sizes = np.array([n, block])
    g = dt.TaskGraph("numpy")
    g.add("axpb", _axpb_tile, x, y, sizes[0], np.float32(2.5), np.float64(-1.0), sizes[1],
          tiles=triton.cdiv(n, block),
          reads=lambda t, r: dt.region(x, (t * block, (t + 1) * block)),
          writes=lambda t, r: dt.region(y, (t * block, (t + 1) * block)))
    assert [type(v) for v in g.tasks[0].args[2:]] == [int, float, float, int]
    g.compile()()
    return (y - (x * 2.5 - 1.0)).abs().max().item()


def test_numpy_scalars_are_passed_as_python_numbers(backend):
    # before: "cannot convert 40 of type <class 'numpy.int64'> to tensor" at the first call
    # (Triton's GPU launcher: "failed to specialize argument of type: numpy.int64")
    errors = ditron.launch(_numpy_scalars_case, 1, backend=backend)
    assert errors[0] <= 1e-6


def test_values_no_kernel_takes_are_refused_when_added():
    x = torch.zeros(16)
    for bad, why in (([1, 2], r"a list, which a kernel cannot take \(pass a tuple\)"),
                     ("two", "a str, which a kernel cannot take"),
                     ((x, {"b": 1}), "a dict, which a kernel cannot take")):
        g = dt.TaskGraph("bad")
        with pytest.raises(TypeError, match=rf"task 'axpb': argument 'a' is {why}"):
            g.add("axpb", _axpb_tile, x, x, 16, bad, 0.0, 16, tiles=1)
        assert not g.tasks
    # what kernels take is kept as given (a constexpr may be anything Triton hashes)
    g = dt.TaskGraph("good")
    task = g.add("axpb", _axpb_tile, x, x, True, None, (1, 2.0), "16", tiles=1)
    assert task.args == (x, x, True, None, (1, 2.0), "16")


def test_a_tuple_of_descriptors_fences_the_async_proxy():
    # a descriptor inside a tuple argument was not seen: its loads were not fenced
    a, b = torch.zeros(64), torch.zeros(64)
    pair = (TensorDescriptor.from_tensor(a, [16]), TensorDescriptor.from_tensor(b, [16]))
    g = dt.TaskGraph("pair")
    g.add("plain", _copy_pair_tile, (a, b), 16, tiles=4)
    g.add("described", _copy_pair_tile, pair, 16, tiles=4)
    text, _ = codegen.source(g.tasks)
    branches = text.split("if task == 0:")[1].split("elif task == 1:")
    assert "fence_async_proxy" not in branches[0]
    assert "fence_async_proxy" in branches[1].split("if TRACE")[0]


def _foreign_tuple_case() -> str:
    x = torch.zeros(16, device=ditron.world().device)
    g = dt.TaskGraph("meta")
    g.add("copy", _copy_pair_tile, (x, torch.zeros(16, device="meta")), 16, tiles=1)
    try:
        g.compile()
    except ValueError as exc:
        return str(exc)
    return "compiled"


def test_a_tensor_in_a_tuple_on_another_device_is_refused(backend):
    got = ditron.launch(_foreign_tuple_case, 1, backend=backend)
    assert "task 'copy': argument 'pair' is on meta" in got[0], got
