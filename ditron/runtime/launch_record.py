"""Record the kernels the CPU backend launches, so they can be compiled for a GPU later.

With ``DITRON_RECORD_LAUNCHES=DIR`` every interpreted launch appends one line to
``DIR/launches-<pid>.jsonl``: the kernel (module, name and source file) and a description of its
arguments (tensor dtypes, tensor descriptors, integer values, named tuples, keyword
options). The tool
``tools/cuda_compile_check.py`` replays each distinct launch through Triton's CUDA compiler
for sm_90 without a GPU, which finds compile-only errors (types, globals, constexpr defaults)
before anyone spends GPU time.
"""

from __future__ import annotations

import json
import os

import torch

_INSTALLED = False


def describe(value):
    from triton.tools.tensor_descriptor import TensorDescriptor

    if isinstance(value, TensorDescriptor):  # host-side TMA descriptor
        return {"tensordesc": {"dtype": str(value.base.dtype).removeprefix("torch."),
                               "shape": [int(s) for s in value.shape],
                               "strides": [int(s) for s in value.strides],
                               "block_shape": [int(s) for s in value.block_shape],
                               "padding": value.padding}}
    if isinstance(value, torch.Tensor):
        return {"tensor": str(value.dtype).removeprefix("torch.")}
    if isinstance(value, tuple):
        items = [describe(v) for v in value]
        if hasattr(value, "_fields"):
            t = type(value)
            return {"namedtuple": f"{t.__module__}:{t.__qualname__}", "items": items}
        return {"tuple": items}
    if isinstance(value, (bool, int, float, str)) or value is None:
        return {"value": value}
    import triton.language as tl

    if isinstance(value, tl.dtype):  # a constexpr type argument (e.g. an accumulator's)
        return {"tl_dtype": value.name}
    if hasattr(value, "value"):  # tl.constexpr
        return describe(value.value)
    return {"unsupported": type(value).__name__}


def install(directory: str) -> None:
    """Wrap the interpreter's launch so that each launch that returns is recorded
    (idempotent). One that raises is not: a test that provokes a compile-time refusal
    (``tl.static_assert``) expects it to fail to compile."""
    global _INSTALLED
    if _INSTALLED:
        return
    from triton.runtime.interpreter import InterpretedFunction

    original = InterpretedFunction.run
    os.makedirs(directory, exist_ok=True)
    path = os.path.join(directory, f"launches-{os.getpid()}.jsonl")

    def run(self, *args, grid, warmup, **kwargs):
        record = {
            "kernel": f"{self.fn.__module__}:{self.fn.__qualname__}",
            "file": self.fn.__code__.co_filename,  # for generated modules (ditron.task)
            "args": [describe(a) for a in args],
            "kwargs": {k: describe(v) for k, v in kwargs.items()},
        }
        result = original(self, *args, grid=grid, warmup=warmup, **kwargs)
        with open(path, "a") as f:
            f.write(json.dumps(record) + "\n")
        return result

    InterpretedFunction.run = run
    _INSTALLED = True
