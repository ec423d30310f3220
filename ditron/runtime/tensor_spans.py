"""Where a tensor's elements lie in memory: whether two of them share an address
(:func:`shares_memory`), the bytes they span (:func:`byte_span`), and whether two tensors'
spans meet (:func:`spans_overlap`). Outputs are checked with them before a kernel writes:
a write through elements that share memory races, and one into an operand's span changes
what other tiles still read."""

from __future__ import annotations

import torch

#: elements up to which :func:`shares_memory` lists a layout's offsets to tell
SHARED_CHECK_MAX = 1 << 24


def shares_memory(t: torch.Tensor) -> bool:
    """Whether two elements of ``t`` lie at one address. Layouts whose dimensions, by
    stride, each step past the reach of the smaller ones (every layout torch makes but
    ``expand`` and ``as_strided``) are told by their strides; others by their elements'
    offsets, and those of more than :data:`SHARED_CHECK_MAX` elements count as sharing."""
    if t.is_contiguous() or t.numel() == 0:
        return False
    dims = sorted((abs(st), n) for st, n in zip(t.stride(), t.shape, strict=True) if n > 1)
    reach = 0
    for st, n in dims:
        if st <= reach:
            break
        reach += st * (n - 1)
    else:
        return False
    if dims[0][0] == 0 or t.numel() > SHARED_CHECK_MAX:
        return True
    offsets = torch.zeros((), dtype=torch.int64, device="cpu")
    for st, n in dims:
        offsets = offsets[..., None] + torch.arange(n, device="cpu") * st
    return bool(offsets.unique().numel() < offsets.numel())


def byte_span(t: torch.Tensor) -> tuple[int, int]:
    """The bytes ``[lo, hi)`` that ``t``'s elements lie in (empty for an empty ``t``)."""
    if t.numel() == 0:
        return (0, 0)
    lo = t.data_ptr() + t.element_size() * sum(st * (n - 1) for st, n in
                                               zip(t.stride(), t.shape, strict=True) if st < 0)
    extent = sum(abs(st) * (n - 1) for st, n in zip(t.stride(), t.shape, strict=True))
    return lo, lo + (extent + 1) * t.element_size()


def spans_overlap(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Whether the byte spans of ``a`` and ``b`` (:func:`byte_span`) meet: they may share
    elements (interleaved tensors, ``x[:, ::2]`` and ``x[:, 1::2]``, count too)."""
    (lo, hi), (lo2, hi2) = byte_span(a), byte_span(b)
    return lo < hi and lo2 < hi2 and lo < hi2 and lo2 < hi


def elements_meet(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Whether an element of ``a`` and one of ``b`` share a byte. Tensors whose spans meet
    (:func:`spans_overlap`) are told apart by their elements' byte ranges, so interleaved
    ones (``x[:, ::2]`` and ``x[:, 1::2]``) do not meet; together more than
    :data:`SHARED_CHECK_MAX` elements with meeting spans count as meeting."""
    if not spans_overlap(a, b):
        return False
    if a.numel() + b.numel() > SHARED_CHECK_MAX:
        return True
    starts, ends, mine = [], [], []
    for i, t in enumerate((a, b)):  # host tensors, whatever the caller's default device
        offsets = torch.zeros((), dtype=torch.int64, device="cpu")
        for st, n in zip(t.stride(), t.shape, strict=True):
            offsets = offsets[..., None] + torch.arange(n, device="cpu") * st
        first = t.data_ptr() + offsets.reshape(-1) * t.element_size()
        starts.append(first)
        ends.append(first + t.element_size())
        mine.append(torch.full_like(first, i))
    start, order = torch.cat(starts).sort(stable=True)
    end, which = torch.cat(ends)[order], torch.cat(mine)[order]
    low = torch.iinfo(torch.int64).min
    for i in (0, 1):  # an element of the other tensor, starting no later, reaching past start
        reach = torch.where(which == 1 - i, end, low).cummax(0).values
        if bool(((which == i) & (start < reach)).any()):
            return True
    return False
