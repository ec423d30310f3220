"""The symmetric heap: the same buffers, at the same offsets, in every rank's memory.

Allocation is collective: every rank of the job calls :meth:`SymmetricHeap.alloc` with the
same arguments in the same order. The allocator is deterministic over a sorted free list:
buffers are placed first-fit from the bottom, or (``from_top=True``, for small long-lived
buffers such as signal pads) last-fit from the top, at the high end of the highest free block
that fits, so long-lived buffers do not sit between the workspaces and split the free space.
Equal call sequences give equal offsets; each allocation's shape, dtype, offset and name
(as given: ``None`` for an unnamed one) are compared across ranks and a mismatch raises on
every rank before anyone uses the buffer. The name is part of the check because named
buffers are found by their names (``signal_pad(key)``, the ops' workspaces): ranks that
allocate under different names at the same point are out of step even where the shapes
match (a peer's writes into its ``"a"`` would land in this rank's ``"b"``). Every offset is a
multiple of :data:`ALIGNMENT`: the heap uses its mapping's bytes up to the last multiple
(a ``DITRON_HEAP_SIZE`` of ``100001`` gives a heap of 99840 bytes).
"""

from __future__ import annotations

import bisect
import dataclasses
import math
from collections.abc import Sequence

import torch
import torch.distributed as dist

from . import host_rows
from .backends import HeapMapping
from .integers import as_int

ALIGNMENT = 256
#: the largest element count (and stride) of a torch tensor
_MAX_NUMEL = 2**63 - 1


class HeapExhausted(RuntimeError):
    """No free block is large enough on some rank. Raised on every rank of the allocation
    (the check is collective), so callers may react collectively, e.g. free cached
    workspaces and try again."""


@dataclasses.dataclass(frozen=True)
class Allocation:
    offset: int
    nbytes: int
    name: str
    shape: tuple[int, ...]
    dtype: torch.dtype


def normalize_shape(shape: int | Sequence[int]) -> tuple[int, ...]:
    if as_int(shape) is not None:
        shape = (shape,)
    try:
        dims = tuple(as_int(d) for d in shape)  # 2.5 is refused, not truncated
    except TypeError:
        dims = (None,)
    if None in dims:
        raise TypeError(f"shape must be an int or a sequence of ints, got {shape!r}")
    if any(d < 0 for d in dims):
        raise ValueError(f"shape has a negative dimension: {dims}")
    # torch's limit on the elements and strides (an empty dim counts as 1 in a stride): a
    # shape past it, e.g. (0, 2**70), failed only after its block was taken
    if math.prod(max(d, 1) for d in dims) > _MAX_NUMEL:
        raise ValueError(f"shape {dims} is too large for a torch tensor (its elements or "
                         f"strides exceed 2**63 - 1)")
    return dims


def _address(tensor: torch.Tensor) -> int:
    """The address of ``tensor``'s first element. Torch reports ``data_ptr()`` 0 for every
    tensor without elements; its place is still its storage's start plus its offset."""
    ptr = tensor.data_ptr()
    if ptr == 0:
        ptr = (tensor.untyped_storage().data_ptr()
               + tensor.storage_offset() * tensor.element_size())
    return ptr


def _span(tensor: torch.Tensor) -> int:
    """The bytes from ``tensor``'s first element to the end of its last (0 when empty)."""
    if tensor.numel() == 0:
        return 0
    span = 1 + sum((n - 1) * s for n, s in zip(tensor.shape, tensor.stride(), strict=True))
    return span * tensor.element_size()


class SymmetricHeap:
    """One rank's allocator over its mapped heap and the peers' heaps."""

    def __init__(self, mapping: HeapMapping, rank: int, host_group, poison: bool = False):
        self.mapping = mapping
        self.rank = rank
        # whole ALIGNMENT blocks only: a last partial block would give the buffers placed
        # from the top (signal pads) misaligned offsets, which int64 views refuse
        self.size = mapping.local.numel() // ALIGNMENT * ALIGNMENT
        self._group = host_group
        self._poison = poison
        self._free: list[tuple[int, int]] = [(0, self.size)]  # sorted (offset, nbytes)
        self._live: dict[int, Allocation] = {}
        self._views: dict[tuple, torch.Tensor] = {}  # peer() results: the mapping never moves
        #: buffers freed so far: what was checked against the live buffers stays valid while
        #: it is unchanged (the sm engine's cached descriptor tables)
        self.frees = 0

    # -- allocation -------------------------------------------------------------------------
    # Heap tensors outlive the call that made them: made under inference_mode, dtype views
    # would be inference tensors, which no later call outside that mode may write.
    @torch.inference_mode(False)
    def alloc(self, shape, dtype: torch.dtype, name: str | None = None, *,
              from_top: bool = False) -> torch.Tensor:
        """A new symmetric buffer (collective). ``from_top``: place it at the high end of the
        highest free block large enough (for small buffers that live long, e.g. signal pads,
        so they stay clear of the bottom-up workspaces); otherwise at the low end of the
        lowest one. ``name`` (a str, or ``None``) labels the buffer in diagnostics and must
        be the same on every rank, as shape and dtype must (``ValueError`` on every rank
        otherwise: a name holding a rank number is a caller's bug)."""
        try:
            dims = normalize_shape(shape)
            if not isinstance(dtype, torch.dtype):
                raise TypeError(f"dtype must be a torch.dtype, got {dtype!r}")
            if name is not None and not isinstance(name, str):
                raise TypeError(f"name must be a str or None, got {name!r}")
        except (TypeError, ValueError) as exc:
            self._refuse(exc)  # the peers are in the allocation's gather: they raise too
            raise
        itemsize = dtype.itemsize
        nbytes = math.prod(dims) * itemsize
        padded = max(-(-nbytes // ALIGNMENT), 1) * ALIGNMENT
        offset = self._take(padded, bool(from_top))
        problem = None if offset is not None else self._exhausted_message(nbytes, padded)
        if self._poison and offset is not None:
            # before the collective check: once it returns, a peer may write into the
            # buffer, and a later fill would overwrite what it wrote
            self._fill_poison(offset, nbytes)
        try:
            self._check_symmetric((dims, str(dtype), offset, name), problem)
        except BaseException:
            if offset is not None:
                self._give_back(offset, padded)
            raise
        name = name or f"buffer@{offset}"
        self._live[offset] = Allocation(offset, padded, name, dims, dtype)
        raw = self.mapping.local[offset : offset + nbytes]
        return raw.view(dtype).view(dims)

    def _fill_poison(self, offset: int, nbytes: int) -> None:
        """Fill bytes ``[offset, offset + nbytes)`` with 0xFF (NaN for floats) and wait for
        the fill to finish (peers write through their own streams)."""
        raw = self.mapping.local[offset : offset + nbytes]
        raw.fill_(0xFF)
        if raw.device.type == "cuda":
            torch.cuda.current_stream(raw.device).synchronize()

    def free(self, tensor: torch.Tensor) -> None:
        """Return ``tensor``'s block to the heap (every rank must free the same blocks).
        ``tensor`` must be a whole buffer: the tensor :meth:`alloc` returned, or a view of all
        of its bytes and no more (a reshape, a transpose); a part of one is refused."""
        offset = self.offset_of(tensor)
        alloc = self._live.get(offset)
        if alloc is None:
            raise ValueError("ditron.free: tensor is not the start of a live symmetric buffer")
        nbytes = math.prod(alloc.shape) * alloc.dtype.itemsize
        if tensor.numel() * tensor.element_size() != nbytes or _span(tensor) != nbytes:
            raise ValueError(f"ditron.free: the tensor (shape {tuple(tensor.shape)}, stride "
                             f"{tensor.stride()}, {tensor.dtype}) is not all of the symmetric "
                             f"buffer {alloc.name!r} (shape {alloc.shape}, {alloc.dtype}, "
                             f"{nbytes} bytes); free the whole buffer (the tensor "
                             f"ditron.empty returned)")
        del self._live[offset]
        self._give_back(offset, alloc.nbytes)
        self._views.clear()  # a view of the freed block must be asked for (and refused) again
        self.frees += 1

    def _take(self, nbytes: int, from_top: bool = False) -> int | None:
        """Cut ``nbytes`` from a free block: the low end of the first that fits, or with
        ``from_top`` the high end of the last that fits; ``None`` when none does."""
        order = range(len(self._free) - 1, -1, -1) if from_top else range(len(self._free))
        for i in order:
            off, size = self._free[i]
            if size >= nbytes:
                if size == nbytes:
                    del self._free[i]
                elif from_top:
                    self._free[i] = (off, size - nbytes)
                    return off + size - nbytes
                else:
                    self._free[i] = (off + nbytes, size - nbytes)
                return off
        return None

    def _coalesce(self, start: int) -> None:
        i = start
        while i + 1 < len(self._free):
            off, size = self._free[i]
            nxt, nsize = self._free[i + 1]
            if off + size == nxt:
                self._free[i] = (off, size + nsize)
                del self._free[i + 1]
            else:
                i += 1

    _WHAT = ("ditron.empty (every rank must allocate the same shapes under the same names "
             "in the same order, and free the same buffers)")

    def _world_size(self) -> int:
        return dist.get_world_size(self._group) if self._group is not None else 1

    def _refuse(self, exc: Exception) -> None:
        """Join the allocation's gather that the peers make with this rank's refusal of its
        own arguments (``exc``), so that they raise instead of waiting for this rank."""
        if self._world_size() > 1:
            host_rows.exchange(self._group, self._WHAT, ("allocation", "problem"),
                               (None, f"{type(exc).__name__}: {exc}"), host_rows.REFUSED)

    def _check_symmetric(self, meta, problem: str | None) -> None:
        """Compare ``meta`` across ranks; raise on heap exhaustion anywhere or a mismatch."""
        if self._world_size() == 1:
            if problem:
                raise HeapExhausted(problem)
            return
        what = self._WHAT
        rows = host_rows.exchange(self._group, what, ("allocation", "problem"), (meta, problem),
                                  host_rows.PROBLEM if problem else host_rows.OK)
        if rows.calls is None:  # the same allocation everywhere, no problem
            return
        if (calls := rows.different_calls()) is not None:
            raise ValueError(f"{what}: ranks are in different collective calls (an allocation "
                             f"on some, another call on others):\n{calls}")
        refused = [f"  rank {r}: {call[2][1]}" for r, (kind, call)
                   in enumerate(zip(rows.kinds, rows.calls, strict=True))
                   if kind == host_rows.REFUSED]
        if refused:
            raise ValueError(f"{what}: {'a rank' if len(refused) == 1 else 'ranks'} refused "
                             f"the allocation's arguments:\n" + "\n".join(refused))
        metas = [call[2] for call in rows.calls]
        failed = [(r, p) for r, (_, p) in enumerate(metas) if p]
        if failed:
            raise HeapExhausted(failed[0][1] + f" (exhausted on ranks {[r for r, _ in failed]})")
        from .agreement import disagreement  # agreement -> world -> heap

        raise ValueError(disagreement(what, ("shape", "dtype", "heap_offset", "name"),
                                      [m for m, _ in metas]))

    def _give_back(self, offset: int, nbytes: int) -> None:
        i = bisect.bisect(self._free, (offset, 0))
        self._free.insert(i, (offset, nbytes))
        self._coalesce(max(i - 1, 0))

    def _exhausted_message(self, nbytes: int, padded: int) -> str:
        """``nbytes`` asked for, ``padded`` of them in whole ``ALIGNMENT`` blocks."""
        free = sum(s for _, s in self._free)
        largest = max((s for _, s in self._free), default=0)
        held = sorted(self._live.values(), key=lambda a: (-a.nbytes, a.offset))[:3]
        biggest = "".join(f"{', ' if i else '; the largest: '}{a.name!r} ({a.nbytes} bytes)"
                          for i, a in enumerate(held))
        return (f"ditron.empty: symmetric heap exhausted on rank {self.rank}: requested "
                f"{nbytes} bytes{'' if padded == nbytes else f' ({padded} with alignment)'}, "
                f"used {self.size - free} of {self.size} bytes (free {free}, "
                f"largest free block {largest}){biggest}; raise DITRON_HEAP_SIZE, "
                f"ditron.free buffers, or free the ops' cached workspaces with "
                f"ditron.ops.release_workspaces() (collective)")

    # -- lookup -----------------------------------------------------------------------------
    def contains(self, tensor: torch.Tensor) -> bool:
        """Whether ``tensor`` lies in this heap, inside one live buffer (the tensors of a
        freed buffer do not: its block may already hold another buffer)."""
        offset = self._offset(tensor)
        return offset is not None and self._is_live(offset, tensor)

    def offset_of(self, tensor: torch.Tensor) -> int:
        offset = self._offset(tensor)
        if offset is None:
            raise ValueError("tensor is not in the symmetric heap (of the current world); "
                             "allocate it with ditron.empty or ditron.zeros (with several "
                             "worlds in a process: inside ditron.use(the world it belongs "
                             "to))")
        return offset

    def _offset(self, tensor: torch.Tensor) -> int | None:
        """``tensor``'s byte offset in this rank's heap, or ``None`` when it lies elsewhere
        (an empty view may also sit just past the heap's last byte)."""
        if tensor.device != self.mapping.local.device:
            return None
        offset = _address(tensor) - self.mapping.bases[self.rank]
        if 0 <= offset < self.size or (offset == self.size and tensor.numel() == 0):
            return offset
        return None

    def mapped_rank(self, tensor: torch.Tensor) -> int | None:
        """The rank whose heap, as this process maps it, holds ``tensor``'s first element
        (this rank for its own heap, ``q`` for a view ``peer(t, q)`` made), else ``None``."""
        if tensor.device != self.mapping.local.device:
            return None
        address = _address(tensor)
        for rank, (base, mapped) in enumerate(zip(self.mapping.bases, self.mapping.peers,
                                                  strict=True)):
            if mapped is not None and base <= address < base + self.size:
                return rank
        return None

    def describe(self, offset: int) -> str:
        """Name the buffer and element holding byte ``offset`` (for diagnostics): a live
        buffer's element, a free part of the heap, or an address outside it (a wait on a
        plain tensor)."""
        for alloc in self._live.values():
            if alloc.offset <= offset < alloc.offset + alloc.nbytes:
                itemsize = alloc.dtype.itemsize
                return f"{alloc.name}[{(offset - alloc.offset) // itemsize}]"
        if not 0 <= offset < self.size:
            return f"an address outside the symmetric heap (heap offset {offset})"
        return f"heap offset {offset} (in no live buffer)"

    def peer(self, tensor: torch.Tensor, rank: int) -> torch.Tensor:
        """``tensor`` (a symmetric tensor or a view of one, conjugate and negative views
        included) as it lies in ``rank``'s heap."""
        if type(rank) is not int:  # before the cache: True would find rank 1's view
            index = as_int(rank)
            if index is None:
                raise TypeError(f"ditron.peer: rank must be an int, got {rank!r}")
            rank = index
        key = (tensor.data_ptr() or _address(tensor), tensor.shape, tensor.stride(),
               tensor.dtype, tensor.device, rank,  # empty tensors: data_ptr() is 0 for all
               tensor.is_conj(), tensor.is_neg())
        view = self._views.get(key)
        if view is not None:
            return view
        view = self._peer_view(tensor, rank)
        if len(self._views) >= 4096:
            self._views.clear()
        self._views[key] = view
        return view

    @torch.inference_mode(False)
    def _peer_view(self, tensor: torch.Tensor, rank: int) -> torch.Tensor:
        if not 0 <= rank < len(self.mapping.peers):
            raise ValueError(f"ditron.peer: rank {rank} is outside [0, {len(self.mapping.peers)})")
        offset = self.offset_of(tensor)
        self._check_live(offset, tensor)
        other = self.mapping.peers[rank]
        if other is None:
            raise ValueError(f"ditron.peer: rank {rank} is on another node; its heap is not "
                             f"mapped on rank {self.rank}")
        itemsize = tensor.element_size()
        usable = other[: self.size - self.size % itemsize].view(tensor.dtype)
        view = usable.as_strided(tensor.shape, tensor.stride(), offset // itemsize)
        # a conjugate or negative view (``z.conj()``, ``z.conj().imag``) reads the same
        # values on the peer's copy
        if tensor.is_conj():
            view = view.conj()
        if tensor.is_neg():
            view = torch._neg_view(view)
        return view

    def _is_live(self, offset: int, tensor: torch.Tensor) -> bool:
        """Whether the bytes ``tensor`` spans from ``offset`` lie inside one live buffer (an
        empty tensor: always)."""
        if tensor.numel() == 0:
            return True
        end = offset + _span(tensor)
        alloc = self._live.get(offset)  # the common case: a whole buffer, no scan
        if alloc is not None and end <= offset + alloc.nbytes:
            return True
        return any(a.offset <= offset and end <= a.offset + a.nbytes
                   for a in self._live.values())

    def _check_live(self, offset: int, tensor: torch.Tensor) -> None:
        """Raise unless the bytes ``tensor`` spans lie inside one live buffer."""
        if not self._is_live(offset, tensor):
            end = offset + _span(tensor)
            raise ValueError(f"ditron.peer: the tensor spans heap bytes [{offset}, {end}), "
                             f"which are not inside one live symmetric buffer (freed, or "
                             f"reaching past the buffer it views)")

    @property
    def used_bytes(self) -> int:
        return self.size - sum(s for _, s in self._free)
