"""Timestamps for traces (``ditron.trace``)."""

from __future__ import annotations

import triton
import triton.language as tl


@triton.jit
def timestamp(counter, GPU_TIMER: tl.constexpr):
    """The GPU's global timer in ns (``GPU_TIMER``: CUDA backend only, inline PTX), or a
    logical clock on the CPU backend, where the interpreter runs no inline assembly: the
    next value of the int64 counter ``counter`` (event order, not time)."""
    if GPU_TIMER:
        t = tl.inline_asm_elementwise("mov.u64 $0, %globaltimer;", "=l", [], dtype=tl.int64,
                                      is_pure=False, pack=1)
    else:
        t = tl.atomic_add(counter, 1, sem="relaxed")
    return t
