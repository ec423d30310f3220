"""Regions: the boxes of tensors a task's tile reads or writes.

A :class:`Region` is a box of one tensor (a half-open range per dimension) on one rank's copy
of it. Dependencies between tiles are derived from regions alone: two accesses conflict when
their elements share a byte on the same rank and at least one writes. Boxes of one view
are compared as boxes; boxes of two views of one buffer (or of a view whose elements share
memory, as ``expand`` makes) in the :class:`Frame` common to both, where their bytes are
unions of sub-boxes of one strided tensor of bytes (slices with or without steps, rows,
transposes, ``x.view(-1)`` or a view as another dtype against ``x``); where no frame places
both (a reshape across rows, a step of 3 against none), by their elements' addresses
(:func:`regions_meet`), and :func:`ditron.task.graph.derive` refuses the few boxes that
cannot be compared either way where their bytes meet. Boxes of a view with overlapping
windows (``unfold``) are compared by their addresses too, or by the bytes they span.
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


def _steps(t: torch.Tensor) -> list[tuple[int, int, int]] | None:
    """``t``'s dimensions that step through memory, in bytes, by stride: ``(stride, size,
    dim)`` for each of more than one element and a stride other than 0 (a dimension of
    stride 0, as ``expand`` makes, repeats the same elements), and the bytes of an element
    as a dimension of its own (stride 1, dim ``-1``); ``None`` when two share a stride or
    one has a negative stride (no frame places ``t``)."""
    size = t.element_size()
    steps = [(st * size, n, d) for d, (st, n) in enumerate(zip(t.stride(), t.shape,
                                                                strict=True))
             if n > 1 and st != 0]
    if size > 1:
        steps.append((1, size, -1))
    strides = {st for st, _, _ in steps}
    if len(strides) < len(steps) or any(st < 0 for st in strides):
        return None
    return sorted(steps)


def _mixed_ranges(lo: int, hi: int, radices: Sequence[int]) -> list[tuple[Range, ...]]:
    """The values ``[lo, hi)`` (``lo < hi``) of a mixed-radix number as boxes of its digits
    (lowest first; digit ``j`` below ``radices[j]``, the last digit unbounded): at most
    ``2 * len(radices) + 1`` of them."""
    if not radices:
        return [((lo, hi),)]
    r, rest = radices[0], radices[1:]
    (q_lo, d_lo), (q_hi, d_hi) = divmod(lo, r), divmod(hi, r)
    if q_lo == q_hi:
        return [((d_lo, d_hi), *_mixed_ranges(q_lo, q_lo + 1, rest)[0])]
    boxes = []
    if d_lo:
        boxes.append(((d_lo, r), *_mixed_ranges(q_lo, q_lo + 1, rest)[0]))
        q_lo += 1
    if q_lo < q_hi:
        boxes += [((0, r), *box) for box in _mixed_ranges(q_lo, q_hi, rest)]
    if d_hi:
        boxes.append(((0, d_hi), *_mixed_ranges(q_hi, q_hi + 1, rest)[0]))
    return boxes


@dataclasses.dataclass(frozen=True)
class Frame:
    """A strided virtual tensor of bytes that views of one buffer are unions of sub-boxes
    of, so that their boxes are compared in its coordinates.

    ``strides`` (in bytes, ascending from 1) each divide the next, so that the byte at
    ``origin + e`` has the unique coordinates: the mixed-radix digits of ``e`` (digit ``j``
    below ``strides[j + 1] // strides[j]``, the last unbounded, negative below ``origin``).
    A view fits when its dimensions that step through memory (the bytes of an element one
    of them) step along strides of the frame, each along the digits from its stride to the
    next one's (the largest along the rest) without carrying past them; the bytes of a
    box of it are then a union of boxes of coordinates (one per dimension and digit, or a
    few where a dimension spans several digits: ``x`` against ``x[:, ::2]``, ``x`` against
    ``x.view(-1)``), and the bytes of two boxes meet exactly where their boxes in the
    frame do."""

    origin: int
    strides: tuple[int, ...]

    @classmethod
    def common(cls, a: torch.Tensor, b: torch.Tensor) -> Frame | None:
        """A frame that both ``a`` and ``b`` fit, else ``None``: strides that are not one
        chain of divisors (a reshape of a view across its rows, a step of 3 against none),
        views that carry against each other (rows of one straddling rows of the other),
        dimensions that do not step apart (``unfold``'s overlapping windows)."""
        steps_a, steps_b = _steps(a), _steps(b)
        if steps_a is None or steps_b is None:
            return None
        strides = tuple(sorted({1} | {st for st, _, _ in steps_a + steps_b}))
        if any(hi % lo for lo, hi in pairwise(strides)):
            return None
        # the origin decides which digits a view's first element has: the start of either
        # view (a view fits itself from its own start), else the lower one
        for origin in dict.fromkeys((a.data_ptr(), b.data_ptr(),
                                     min(a.data_ptr(), b.data_ptr()))):
            frame = cls(origin, strides)
            if frame._fits(a, steps_a) and frame._fits(b, steps_b):
                return frame
        return None

    def _groups(self, steps: list[tuple[int, int, int]]) -> list[tuple[int, int]]:
        """The digits ``[j, j_end)`` each step of a view (ascending) runs along."""
        starts = [self.strides.index(st) for st, _, _ in steps]
        return list(zip(starts, [*starts[1:], len(self.strides)][:len(starts)], strict=True))

    def _value(self, e: int, j: int, j_end: int) -> int:
        """The number that digits ``[j, j_end)`` of offset ``e`` make."""
        value = e // self.strides[j]
        return value % (self.strides[j_end] // self.strides[j]) if j_end < len(
            self.strides) else value

    def _fits(self, t: torch.Tensor, steps: list[tuple[int, int, int]]) -> bool:
        e = t.data_ptr() - self.origin
        for (_, n, _), (j, j_end) in zip(steps, self._groups(steps), strict=True):
            if j_end < len(self.strides) and (self._value(e, j, j_end) + n
                                              > self.strides[j_end] // self.strides[j]):
                return False
        return True

    def place(self, region: Region) -> list[tuple[Range, ...]]:
        """The bytes of ``region``'s elements as boxes of this frame's coordinates (one box
        per digit; ``region.tensor`` fits the frame, the box is not empty)."""
        t = region.tensor
        steps = _steps(t)
        e = t.data_ptr() - self.origin
        fixed = []  # the digits of the view's first byte
        rest = e
        for lo, hi in pairwise(self.strides):
            rest, digit = divmod(rest, hi // lo)
            fixed.append((digit, digit + 1))
        fixed.append((rest, rest + 1))
        boxes = [tuple(fixed)]
        for (_, n, d), (j, j_end) in zip(steps, self._groups(steps), strict=True):
            start, stop = region.box[d] if d >= 0 else (0, n)
            value = self._value(e, j, j_end)
            radices = [hi // lo for lo, hi in pairwise(self.strides[j:j_end])]
            pieces = _mixed_ranges(value + start, value + stop, radices)
            boxes = [box[:j] + piece + box[j_end:] for box in boxes for piece in pieces]
        return boxes

    def meet(self, a: Region, b: Region) -> bool:
        """Whether the elements of boxes ``a`` and ``b`` (of views the frame fits, not
        empty) share a byte."""
        return any(boxes_meet(p, q) for p in self.place(a) for q in self.place(b))


#: at most this many runs of adjacent bytes that :func:`regions_meet` splits a box into
RUNS_MAX = 1 << 14


def _byte_steps(region: Region) -> tuple[int, list[tuple[int, int]]] | None:
    """The box's bytes as a strided set: its first byte's address and ``(stride, count)``
    per dimension (bytes, ascending by stride; the bytes of an element one of them) of
    more than one index and a stride other than 0; ``None`` for a negative stride."""
    t = region.tensor
    size = t.element_size()
    first = t.data_ptr() + size * sum(lo * st for (lo, _), st in zip(region.box, t.stride(),
                                                                      strict=True))
    steps = [(st * size, hi - lo) for (lo, hi), st in zip(region.box, t.stride(),
                                                          strict=True)
             if hi - lo > 1 and st != 0] + [(1, size)]
    if any(st < 0 for st, _ in steps):
        return None
    return first, sorted((st, n) for st, n in steps if n > 1)


def _ordered(steps: list[tuple[int, int]]) -> bool:
    """Whether each step passes the bytes the smaller ones reach: the set's bytes are then
    distinct, in the order of their indices (largest stride first)."""
    reach = 0
    for st, n in steps:
        if st <= reach:
            return False
        reach += st * (n - 1)
    return True


def _runs(first: int, steps: list[tuple[int, int]]) -> list[tuple[int, int]] | None:
    """The set's bytes as runs ``[lo, hi)``: its smallest steps that continue each other
    make one run, the others are enumerated; ``None`` past :data:`RUNS_MAX` runs."""
    length, k = 1, 0
    while k < len(steps) and steps[k][0] == length:
        length = steps[k][0] * steps[k][1]
        k += 1
    outer = steps[k:]
    count = 1
    for _, n in outer:
        count *= n
    if count > RUNS_MAX:
        return None
    starts = [first]
    for st, n in outer:
        starts = [s + i * st for s in starts for i in range(n)]
    return [(s, s + length) for s in starts]


def _first_from(first: int, steps: list[tuple[int, int]], at: int) -> int | None:
    """The lowest byte at or after ``at`` of an ordered set (:func:`_ordered`), if any."""
    base = first
    for i in reversed(range(len(steps))):
        if at <= base:
            return base
        st, n = steps[i]
        below = sum(s * (m - 1) for s, m in steps[:i])  # index i's bytes: [base, base + below]
        k = max(0, -(-(at - base - below) // st))
        if k >= n:
            return None
        base += k * st
    return base if base >= at else None


def regions_meet(a: Region, b: Region) -> bool | None:
    """Whether the elements of boxes ``a`` and ``b`` (on one rank, not empty) share a byte,
    worked out from their addresses where no :class:`Frame` places both views (a reshape
    across rows, a step of 3 against none): one box split into runs of adjacent bytes
    (a row of a contiguous view is one), each looked for in the other box, whose bytes
    must be distinct and in index order. ``None`` when neither box can be so compared
    (both with overlapping windows, or runs past :data:`RUNS_MAX`)."""
    got_a, got_b = _byte_steps(a), _byte_steps(b)
    if got_a is None or got_b is None:
        return None
    best = None
    for (first, steps), other in ((got_a, got_b), (got_b, got_a)):
        if _ordered(other[1]):
            runs = _runs(first, steps)
            if runs is not None and (best is None or len(runs) < len(best[0])):
                best = runs, other
    if best is None:
        return None
    runs, (first, steps) = best
    return any((x := _first_from(first, steps, lo)) is not None and x < hi
               for lo, hi in runs)


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
