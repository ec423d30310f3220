"""Torch modules and ``torch.library`` registrations on Ditron's ops (the top layer).

- ``ColumnParallelLinear``, ``RowParallelLinear`` (``linear.py``): tensor-parallel linear
  layers, sequence-parallel by default, whose forward and backward matmuls are the
  overlapped ``ag_gemm`` / ``gemm_rs`` / ``gemm_ar``.
- ``ExpertParallelMLP`` and the differentiable ``moe_dispatch`` / ``grouped_gemm`` /
  ``moe_combine`` (``moe.py``): expert parallelism with autograd.
- ``functional`` (``functional.py``): the same as differentiable functions, and the
  collectives with Megatron-LM's backward conventions.
- ``torch.ops.ditron.*`` (``library.py``): the ops as torch custom ops, registered on import,
  so ``torch.compile`` traces through them (one opaque node each).
"""

from __future__ import annotations

from . import functional, library, moe
from .linear import ColumnParallelLinear, RowParallelLinear
from .moe import ExpertParallelMLP

__all__ = ["ColumnParallelLinear", "ExpertParallelMLP", "RowParallelLinear", "functional",
           "library", "moe"]
