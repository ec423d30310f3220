"""Regions: the boxes of tensors a task's tile reads or writes.

A :class:`Region` is a box of one tensor (a half-open range per dimension) on one rank's copy
of it. Dependencies between tiles are derived from regions alone: two accesses conflict when
they name the same tensor on the same rank, their boxes intersect and at least one writes.
Aliasing views are not traced through: name a buffer by the same tensor object (or the same
view of it) wherever it is read or written.
"""

from __future__ import annotations

import dataclasses
import operator
from collections.abc import Sequence

import torch

from ..runtime.integers import as_int

Range = tuple[int, int]


@dataclasses.dataclass(frozen=True, eq=False)
class Region:
    """A box of ``tensor`` on ``rank``'s copy (``None``: the rank running the tile).

    ``box[d]`` is the half-open index range ``[start, stop)`` of dimension ``d``. A region on
    another rank needs a symmetric tensor (``ditron.empty``) and a rank of the same node.
    """

    tensor: torch.Tensor
    box: tuple[Range, ...]
    rank: int | None = None

    def __post_init__(self) -> None:
        # a box built by hand (``region`` makes valid ones) is checked where it is made:
        # one range of ints per dimension, within it (``start >= stop``: an empty box)
        if not isinstance(self.tensor, torch.Tensor):
            raise TypeError(f"Region: expected a tensor, got {type(self.tensor).__name__}")
        shape = tuple(self.tensor.shape)
        try:
            box = tuple((as_int(lo), as_int(hi)) for lo, hi in self.box)
        except (TypeError, ValueError):
            box = None
        if box is None or len(box) != len(shape) or any(None in r for r in box):
            raise ValueError(f"Region: box {self.box!r} must be one (start, stop) pair of "
                             f"ints per dimension of the {len(shape)}-d tensor")
        for d, ((lo, hi), size) in enumerate(zip(box, shape, strict=True)):
            if lo < 0 or hi > size:
                raise ValueError(f"Region: range ({lo}, {hi}) of dimension {d} is outside "
                                 f"the tensor's shape {shape}")
        rank = self.rank if self.rank is None else as_int(self.rank)
        if self.rank is not None and rank is None:
            raise TypeError(f"Region: rank must be an int or None, got {self.rank!r}")
        object.__setattr__(self, "box", box)
        object.__setattr__(self, "rank", rank)

    @property
    def key(self) -> tuple:
        """Identity of the tensor (view) the box indexes."""
        t = self.tensor
        return (t.untyped_storage().data_ptr(), t.storage_offset(), tuple(t.shape),
                tuple(t.stride()), t.dtype)

    @property
    def empty(self) -> bool:
        return any(lo >= hi for lo, hi in self.box)

    def overlaps(self, other: Region) -> bool:
        """Whether the boxes intersect (the caller has matched tensor and rank)."""
        return all(a0 < b1 and b0 < a1
                   for (a0, a1), (b0, b1) in zip(self.box, other.box, strict=True))


def _index(value) -> int | None:
    """``value`` as an int when it is an integer (``operator.index``; not a ``bool``, a
    mistake as in ``runtime/integers.py``), else ``None``."""
    if isinstance(value, bool):
        return None
    try:
        return operator.index(value)
    except TypeError:
        return None


def _range(spec, size: int, dim: int) -> Range:
    if isinstance(spec, slice):
        if spec.step not in (None, 1):
            raise ValueError(f"region: dimension {dim} has step {spec.step}; only boxes")
        start, stop, _ = spec.indices(size)
        return start, max(start, stop)
    if isinstance(spec, range):  # its indices, not a (start, stop) pair of its first two
        if spec.step != 1:
            raise ValueError(f"region: dimension {dim} has step {spec.step}; only boxes")
        spec = (spec.start, max(spec.start, spec.stop))
    if _index(spec) is not None:  # an int, a NumPy int, an integer tensor of one element
        spec = _index(spec)
        if not -size <= spec < size:
            raise ValueError(f"region: index {spec} out of range for dimension {dim} "
                             f"of size {size}")
        spec %= size
        return spec, spec + 1
    if isinstance(spec, Sequence) and len(spec) == 2:
        start, stop = (_index(v) for v in spec)
        if start is None or stop is None:  # a float was truncated: a box off by a part
            raise TypeError(f"region: range {tuple(spec)!r} of dimension {dim} must be a "
                            f"pair of integers")
        if not 0 <= start <= size or stop < start:
            raise ValueError(f"region: range ({start}, {stop}) is not within dimension {dim} "
                             f"of size {size}")
        return start, min(stop, size)
    raise TypeError(f"region: dimension {dim} takes a slice, an int or a (start, stop) pair "
                    f"(a range of step 1 too), got {spec!r}")


def region(tensor: torch.Tensor, *ranges, rank: int | None = None) -> Region:
    """The box of ``tensor`` given per leading dimension by ``ranges`` (a ``slice``, an
    ``int``, a ``(start, stop)`` pair or a ``range`` of step 1, which is its pair; stops
    past the end are clipped, dimensions not given are whole), on ``rank``'s copy
    (``None``: the rank running the tile).

    ``region(c, (m0, m0 + 64), (n0, n0 + 128))`` is a 64 x 128 tile of ``c``;
    ``region(x)`` is all of ``x``."""
    if not isinstance(tensor, torch.Tensor):
        raise TypeError(f"region: expected a tensor, got {type(tensor).__name__}")
    if len(ranges) > tensor.dim():
        raise ValueError(f"region: {len(ranges)} ranges for a {tensor.dim()}-d tensor")
    box = tuple(_range(s, tensor.shape[d], d) for d, s in enumerate(ranges))
    box += tuple((0, tensor.shape[d]) for d in range(len(ranges), tensor.dim()))
    return Region(tensor, box, rank)
