"""Regions: the boxes of tensors a task's tile reads or writes.

A :class:`Region` is a box of one tensor (a half-open range per dimension) on one rank's copy
of it. Dependencies between tiles are derived from regions alone: two accesses conflict when
their elements may share memory on the same rank and at least one writes. Boxes of one view
are compared as boxes; boxes of two views of one buffer (or of a view whose elements share
memory, as ``expand`` makes) in the :class:`Frame` common to both, where they are sub-boxes
of one strided tensor (slices, rows, transposes of one tensor). Views whose boxes cannot be
compared so (a reshape, another dtype) are refused by :func:`ditron.task.graph.derive`
where their bytes meet; boxes of a view with overlapping windows (``unfold``) are compared
by the bytes they span.
"""

from __future__ import annotations

import dataclasses
import operator
from collections.abc import Sequence
from itertools import pairwise

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
        return boxes_meet(self.box, other.box)

    @property
    def span(self) -> tuple[int, int]:
        """The bytes ``[lo, hi)`` (addresses on this process) that the box's elements lie
        in; for a box that is not empty."""
        t = self.tensor
        lo = hi = 0
        for (start, stop), st in zip(self.box, t.stride(), strict=True):
            first, last = start * st, (stop - 1) * st
            lo, hi = lo + min(first, last), hi + max(first, last)
        size = t.element_size()
        return t.data_ptr() + lo * size, t.data_ptr() + (hi + 1) * size


def boxes_meet(a: Sequence[Range], b: Sequence[Range]) -> bool:
    """Whether two boxes of as many dimensions intersect."""
    return all(a0 < b1 and b0 < a1 for (a0, a1), (b0, b1) in zip(a, b, strict=True))


def _axes(t: torch.Tensor) -> dict[int, int] | None:
    """``t``'s dimensions that step through memory by stride (``{stride: dim}``: of more
    than one element, a stride other than 0; a dimension of stride 0, as ``expand`` makes,
    repeats the same elements); ``None`` when two of them share a stride or one has a
    negative stride (no frame places ``t``)."""
    axes = {st: d for d, (st, n) in enumerate(zip(t.stride(), t.shape, strict=True))
            if n > 1 and st != 0}
    steps = sum(n > 1 and st != 0 for st, n in zip(t.stride(), t.shape, strict=True))
    if len(axes) < steps or any(st < 0 for st in axes):
        return None
    return axes


@dataclasses.dataclass(frozen=True)
class Frame:
    """A strided virtual tensor that views of one buffer are sub-boxes of, so that their
    boxes are compared in its coordinates.

    ``strides`` (in elements, ascending) each divide the next, so that an element at
    ``origin + size * e`` (bytes) has the unique coordinates: its *phase* ``e % strides[0]``
    and the mixed-radix digits of ``e // strides[0]`` (digit ``j`` below
    ``strides[j + 1] // strides[j]``, the last unbounded). A view fits when each dimension
    that steps through memory steps along one stride of its own without carrying into the
    next digit; the elements of a box of it are then a box of coordinates (dimensions of
    stride 0 dropped), and the elements of two boxes meet exactly where their boxes in the
    frame do."""

    origin: int
    size: int
    strides: tuple[int, ...]

    @classmethod
    def common(cls, a: torch.Tensor, b: torch.Tensor) -> Frame | None:
        """The frame that both ``a`` and ``b`` fit, else ``None``: another dtype, strides
        that are not one chain of divisors (a reshape of a view across its rows), a view that
        carries (``x.view(-1)`` against ``x``), dimensions that do not step apart
        (``unfold``'s overlapping windows)."""
        axes_a, axes_b = _axes(a), _axes(b)
        if a.dtype != b.dtype or axes_a is None or axes_b is None:
            return None
        strides = tuple(sorted(set(axes_a) | set(axes_b))) or (1,)
        if any(hi % lo for lo, hi in pairwise(strides)):
            return None
        size = a.element_size()
        origin = min(a.data_ptr(), b.data_ptr())
        if (a.data_ptr() - b.data_ptr()) % size:
            return None
        frame = cls(origin, size, strides)
        return frame if frame._fits(a, axes_a) and frame._fits(b, axes_b) else None

    def _digits(self, t: torch.Tensor) -> list[int]:
        """The coordinates of ``t``'s first element: phase, then one digit per stride."""
        e = (t.data_ptr() - self.origin) // self.size
        digits = [e % self.strides[0]]
        e //= self.strides[0]
        for lo, hi in pairwise(self.strides):
            e, digit = divmod(e, hi // lo)
            digits.append(digit)
        return digits + [e]

    def _fits(self, t: torch.Tensor, axes: dict[int, int]) -> bool:
        digits = self._digits(t)
        for j, (lo, hi) in enumerate(pairwise(self.strides)):
            d = axes.get(lo)
            if d is not None and digits[1 + j] + t.shape[d] > hi // lo:
                return False
        return True

    def place(self, region: Region) -> tuple[Range, ...]:
        """``region``'s box in this frame's coordinates (phase first; ``region.tensor``
        fits the frame)."""
        t = region.tensor
        box = [(c, c + 1) for c in self._digits(t)]
        for (start, stop), st, n in zip(region.box, t.stride(), t.shape, strict=True):
            if n > 1 and st != 0:
                j = 1 + self.strides.index(st)
                box[j] = (box[j][0] + start, box[j][0] + stop)
        return tuple(box)


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
