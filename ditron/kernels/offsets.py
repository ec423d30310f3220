"""Element offsets in the kernels: int32 products ``index * stride`` (the cheaper address
arithmetic) while every tensor spans at most 2**31 elements, int64 past that.

The persistent GEMM and the fused collectives switch to int64 offsets by themselves (their
``WIDE`` constexpr, set from :func:`wide`: K steps ``BLOCK_K * stride`` included); the
grouped GEMMs always use int64 where a product can pass 2**31 (their row numbers are int32:
they refuse ``x`` of more rows, ``grouped_gemm.check_rows``); the task tiles (``tiles.py``)
use int32, so the tasks built on them refuse larger tensors (:func:`check_int32_offsets`).
"""

from __future__ import annotations

import torch

#: the most elements a tensor may span with int32 element offsets (offsets reach span - 1)
INT32_SPAN = 2**31


def element_span(t: torch.Tensor) -> int:
    """Elements from ``t``'s first to its last, plus one (what its offsets must reach); 0
    for an empty tensor."""
    if t.numel() == 0 or t.is_contiguous():
        return t.numel()
    return 1 + sum((n - 1) * abs(s) for n, s in zip(t.shape, t.stride(), strict=True))


def wide(*tensors: torch.Tensor | None) -> bool:
    """Whether any of ``tensors`` (``None`` skipped) needs int64 element offsets."""
    return any(t is not None and element_span(t) > INT32_SPAN for t in tensors)


def check_int32_offsets(where: str, **tensors: torch.Tensor | None) -> None:
    """Raise ``ValueError`` naming the first of ``tensors`` (``None`` skipped) that spans
    more than 2**31 elements, which int32 element offsets cannot reach."""
    for name, t in tensors.items():
        if t is not None and element_span(t) > INT32_SPAN:
            raise ValueError(f"{where}: {name} {tuple(t.shape)} with strides {t.stride()} "
                             f"spans {element_span(t)} elements; the task tiles compute "
                             f"int32 element offsets (at most {INT32_SPAN}): split it")
