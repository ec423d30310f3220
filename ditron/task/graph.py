"""Task graphs: Triton tile functions registered as tasks, and the schedule derived from them.

A :class:`Task` is a ``@triton.jit`` *tile function* ``fn(tile, *args)`` run for
``tile = 0 .. tiles - 1``, plus two host callables saying which :class:`Region` s tile
``tile`` reads and writes when run on rank ``rank``. Tasks run in the order they were added
(program order); tiles of one task are independent of each other.

:func:`derive` turns the tasks into one rank's :class:`Schedule` for the megakernel
(``megakernel.py``). Every (task, tile) pair is an *item*; item ``i`` done on rank ``p`` sets
the scoreboard slot ``p * n_items + i`` of each rank that needs it. Derived from the regions of
every rank (every rank runs the same graph, so each can work out the others' accesses):

* **waits**: an item waits for every earlier item (any rank) whose access conflicts with one
  of its own: elements that meet in one rank's memory, at least one of them a write; less
  the waits that another of its waits implies (one level, ``_prune``). Boxes of one view
  are compared as boxes; boxes of two views of one buffer in the ``region.Frame`` common
  to both (slices with or without steps, rows, transposes, ``x.view(-1)``, other dtypes),
  else by their elements' addresses (``region.regions_meet``: a reshape across rows);
  two boxes that neither compares (overlapping windows both) are refused where their
  bytes meet.
  Conflicts between tiles of one task are an error.
* **begin**: an item that touches another rank ``q``'s memory also waits until ``q`` has
  started this call (slot ``world_size * n_items + q``), i.e. finished the previous one.
* **tail**: a call ends on a rank only when every item of other ranks that touches its
  memory is done; so between two calls the host may read and write its own buffers freely.

Deadlock freedom: each rank's queue lists the items task by task in program order, and all
waits point to items of earlier tasks (or to the start of another rank's call), so the
lowest-numbered item in flight anywhere can always proceed.
"""

from __future__ import annotations

import dataclasses
import heapq
import inspect
import itertools
import numbers
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

import torch

from ..kernels.tile_config import WARPS
from ..runtime.integers import as_int, check_int
from ..runtime.tensor_spans import byte_span, shares_memory
from .region import RUNS_MAX, Frame, Range, Region, boxes_meet, regions_meet

#: the megakernel's ``num_warps`` when no task asks for more (``TaskGraph.num_warps``)
DEFAULT_WARPS = 4


def check_warps(warps: int | None, where: str) -> int | None:
    """``warps`` as an int, refusing a ``num_warps`` Triton would reject (``None`` is
    accepted: not given)."""
    if warps is not None and as_int(warps) not in WARPS:
        raise ValueError(f"{where}: warps must be None or one of {WARPS}, got {warps!r}")
    return None if warps is None else as_int(warps)


class _Context:
    def __repr__(self) -> str:
        return "ditron.task.CTX"


#: Put in a task's arguments where the tile function takes the device context
#: (``ditron.language`` primitives need it): the megakernel passes its own.
CTX = _Context()

#: ``reads`` / ``writes`` of a task: ``(tile, rank)`` -> one region or an iterable of them
Regions = Callable[[int, int], Region | Iterable[Region]]


def _no_regions(tile: int, rank: int) -> Iterable[Region]:
    return ()


def _argument(task: str, param: str, value, const: bool):
    """``value`` as the kernel takes it: an integer or a real number of another type (a
    NumPy scalar) as a Python ``int`` / ``float`` (Triton cannot pass those: the first call
    failed); a runtime parameter's other values checked to be what Triton passes (tensors,
    TMA descriptors, ints, floats, bools, ``None``, tuples of them), else ``TypeError``."""
    if value is CTX or isinstance(value, (bool, torch.Tensor)) or value is None:
        return value
    if isinstance(value, numbers.Integral):
        return int(value)
    if isinstance(value, numbers.Real):
        return float(value)
    if const:
        return value
    if type(value) is tuple:  # a namedtuple (a device context) is passed as it is
        return tuple(_argument(task, param, v, False) for v in value)
    if isinstance(value, tuple) or hasattr(value, "data_ptr"):
        return value
    from triton.language import constexpr
    from triton.runtime.jit import JITFunction
    from triton.tools.tensor_descriptor import TensorDescriptor

    if isinstance(value, (TensorDescriptor, constexpr, JITFunction)):
        return value
    hint = " (pass a tuple)" if isinstance(value, list) else ""
    raise TypeError(f"task {task!r}: argument {param!r} is a {type(value).__name__}, which a "
                    f"kernel cannot take{hint}; runtime parameters take tensors, TMA "
                    f"descriptors, ints, floats, bools, None and tuples of them")


def flatten(value) -> list:
    """``value``, or the values in it when it is a tuple (nested ones too): an argument's
    tensors and TMA descriptors."""
    if not isinstance(value, tuple):
        return [value]
    return [leaf for v in value for leaf in flatten(v)]


def _constexpr(annotation) -> bool:
    import triton.language as tl

    if annotation is tl.constexpr:
        return True
    return isinstance(annotation, str) and annotation.split(".")[-1] == "constexpr"


@dataclasses.dataclass(frozen=True, eq=False)
class Task:
    """One tile function bound to its arguments. See the module docstring."""

    name: str
    fn: Any
    params: tuple[str, ...]  # the tile function's parameters after ``tile``
    constexprs: tuple[bool, ...]
    args: tuple
    tiles: int
    reads: Regions
    writes: Regions
    order: Callable[[int], Sequence[int]] | None = None
    warps: int | None = None  # the num_warps its tiles were sized for (``TaskGraph.add``)

    @classmethod
    def make(cls, name: str, fn, args: tuple, kwargs: dict, *, tiles: int,
             reads: Regions | None, writes: Regions | None,
             order: Callable[[int], Sequence[int]] | None,
             warps: int | None = None) -> Task:
        raw = getattr(fn, "fn", None)
        if raw is None or not hasattr(fn, "arg_names"):
            raise TypeError(f"task {name!r}: fn must be a @triton.jit function, "
                            f"got {type(fn).__name__}")
        if not inspect.isfunction(raw):  # triton.autotune / heuristics wrap the jit function
            raise TypeError(f"task {name!r}: fn must be the @triton.jit function itself, "
                            f"not the {type(fn).__name__} of an autotune / heuristics "
                            f"decorator around it (a megakernel calls its tile functions "
                            f"directly: pass their constexprs as arguments)")
        sig = inspect.signature(raw)
        params = list(sig.parameters.values())
        if not params:
            raise TypeError(f"task {name!r}: the tile function must take the tile index "
                            f"as its first parameter")
        try:
            bound = sig.bind(0, *args, **kwargs)
        except TypeError as exc:
            raise TypeError(f"task {name!r}: arguments do not match "
                            f"{raw.__name__}{sig}: {exc}") from None
        bound.apply_defaults()
        for p in params:
            if p.kind not in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD):
                raise TypeError(f"task {name!r}: parameter {p.name!r} of {raw.__name__} "
                                f"must be positional")
        constexprs = tuple(_constexpr(p.annotation) for p in params[1:])
        values = tuple(_argument(name, p.name, bound.arguments[p.name], const)
                       for p, const in zip(params[1:], constexprs, strict=True))
        tiles = check_int(tiles, f"task {name!r}: tiles")
        warps = check_warps(warps, f"task {name!r}")
        for what, given, of in (("reads", reads, "(tile, rank)"),
                                ("writes", writes, "(tile, rank)"), ("order", order, "rank")):
            if given is not None and not callable(given):  # a region or a list of them
                raise TypeError(f"task {name!r}: {what} must be a function of {of}, got "
                                f"{type(given).__name__}")
        return cls(name, fn, tuple(p.name for p in params[1:]), constexprs, values, tiles,
                   reads or _no_regions, writes or _no_regions, order, warps)

    def tile_order(self, rank: int) -> list[int]:
        if self.order is None:
            return list(range(self.tiles))
        order = [int(t) for t in self.order(rank)]
        if sorted(order) != list(range(self.tiles)):
            raise ValueError(f"task {self.name!r}: order({rank}) is not a permutation of "
                             f"its {self.tiles} tiles")
        return order


@dataclasses.dataclass(frozen=True)
class Schedule:
    """One rank's tables for the megakernel (all int32, CSR lists by item id).

    ``order``: item ids in queue order; ``item_task``, ``item_tile``: what item ``i`` runs;
    ``dep_ptr``/``dep_slot``: scoreboard slots item ``i`` waits for; ``ntf_ptr``/``ntf_rank``:
    the ranks whose slot ``rank * n_items + i`` it sets when done; ``begin_ranks``: ranks to
    tell at the start of a call; ``tail_slots``: slots to wait for at its end.
    ``links``: the signals between this rank and another one that the schedule implies,
    each ``(setter rank, item, waiter rank, item)``, item ``-1`` for the start of the
    setter's call or the end of the waiter's; the other rank's schedule must imply the
    same ones (``compile`` checks), or one waits for a signal the other never sets.
    """

    rank: int
    world_size: int
    n_items: int
    order: list[int]
    item_task: list[int]
    item_tile: list[int]
    dep_ptr: list[int]
    dep_slot: list[int]
    ntf_ptr: list[int]
    ntf_rank: list[int]
    begin_ranks: list[int]
    tail_slots: list[int]
    links: frozenset[tuple[int, int, int, int]] = frozenset()

    @property
    def slots(self) -> int:
        return self.world_size * self.n_items + self.world_size

    def begin_slot(self, rank: int) -> int:
        """The slot ``rank`` sets when it starts a call."""
        return self.world_size * self.n_items + rank

    def setter(self, slot: int) -> tuple[int, int | None]:
        """Who sets ``slot``: ``(rank, item)`` for an item's slot, ``(rank, None)`` for the
        slot ``rank`` sets when it starts a call."""
        if slot >= self.world_size * self.n_items:
            return slot - self.world_size * self.n_items, None
        rank, item = divmod(slot, self.n_items)
        return rank, item

    def waits(self, item: int) -> list[int]:
        return self.dep_slot[self.dep_ptr[item]:self.dep_ptr[item + 1]]

    def notifies(self, item: int) -> list[int]:
        return self.ntf_rank[self.ntf_ptr[item]:self.ntf_ptr[item + 1]]


@dataclasses.dataclass(frozen=True)
class _Access:
    item: int
    task: int
    rank: int  # the rank running the tile
    region: Region
    write: bool


def _regions(task: str, kind: str, fn: Regions, tile: int, rank: int) -> list[Region]:
    """``fn(tile, rank)``: one region or an iterable of them, checked."""
    got = fn(tile, rank)
    if isinstance(got, Region):
        return [got]
    bad = f"task {task!r}: {kind}({tile}, {rank}) must return a ditron.task.region(...) box "
    try:
        regs = list(got)
    except TypeError:
        raise TypeError(f"{bad}or a list of them, got {type(got).__name__}") from None
    for reg in regs:
        if not isinstance(reg, Region):
            raise TypeError(f"{bad}or a list of them, got a {type(reg).__name__} in it")
    return regs


def _accesses(tasks: Sequence[Task], offsets: list[int], world_size: int,
              local_world_size: int, is_symmetric: Callable[[torch.Tensor], bool]) -> dict:
    """Every rank's accesses, grouped by (tensor, rank holding the memory)."""
    by_location: dict[tuple, list[_Access]] = {}
    for rank in range(world_size):
        for k, task in enumerate(tasks):
            for tile in range(task.tiles):
                for write, fn in ((False, task.reads), (True, task.writes)):
                    for reg in _regions(task.name, "writes" if write else "reads", fn, tile,
                                        rank):
                        if reg.empty:
                            continue
                        holder = rank if reg.rank is None else reg.rank
                        if holder != rank:
                            node = _same_node_range(rank, world_size, local_world_size)
                            if holder not in node:
                                raise ValueError(
                                    f"task {task.name!r}: tile {tile} on rank {rank} reaches "
                                    f"rank {holder}, which is not a rank of its node "
                                    f"({node.start}..{node.stop - 1})")
                            if not is_symmetric(reg.tensor):
                                raise ValueError(
                                    f"task {task.name!r}: tile {tile} reaches rank {holder}'s "
                                    f"copy of a tensor that is not symmetric; allocate it "
                                    f"with ditron.empty / ditron.zeros")
                        acc = _Access(offsets[k] + tile, k, rank, reg, write)
                        by_location.setdefault((reg.key, holder), []).append(acc)
    return by_location


def _same_node_range(rank: int, world_size: int, local_world_size: int) -> range:
    start = rank // local_world_size * local_world_size
    return range(start, min(start + local_world_size, world_size))


def derive(tasks: Sequence[Task], rank: int, world_size: int, *,
           local_world_size: int | None = None,
           is_symmetric: Callable[[torch.Tensor], bool] = lambda t: True,
           heap_rank: Callable[[torch.Tensor], int | None] = lambda t: None) -> Schedule:
    """``rank``'s :class:`Schedule` (pure host work; see the module docstring).

    ``heap_rank(t)``: the rank whose symmetric heap, as this process maps it, holds ``t``
    (``None``: no heap's).

    Raises ``ValueError`` for tiles of one task that conflict, regions on ranks of another
    node, remote regions of tensors that are not symmetric, regions of a view of another
    rank's heap (``ditron.peer``: name that copy by ``rank=``), and boxes of two views of one
    buffer that meet in memory, one of them written, where the boxes cannot be compared
    (no ``Frame`` places both views, and ``regions_meet`` cannot tell)."""
    local = local_world_size or world_size
    offsets, n = [], 0
    for task in tasks:
        offsets.append(n)
        n += task.tiles
    by_location = _accesses(tasks, offsets, world_size, local, is_symmetric)
    for accs in by_location.values():
        owner = heap_rank(accs[0].region.tensor)
        if owner is not None and owner != rank:
            a = accs[0]
            raise ValueError(
                f"task {tasks[a.task].name!r}: tile {a.item - offsets[a.task]} names a view "
                f"of rank {owner}'s heap as rank {rank} maps it (ditron.peer) in a region; "
                f"name rank {owner}'s copy by the symmetric tensor itself and rank={owner} "
                f"(dt.region(t, ..., rank={owner})), so the waits between ranks are derived")

    deps: list[set[int]] = [set() for _ in range(n)]  # this rank's waits
    tell: list[set[int]] = [set() for _ in range(n)]  # ranks this rank tells, per item
    begin: set[int] = set()
    tail: set[int] = set()
    links: set[tuple[int, int, int, int]] = set()  # with another rank (Schedule.links)

    def edge(a: _Access, b: _Access) -> None:
        if b.rank == rank:
            deps[b.item].add(a.rank * n + a.item)
        if a.rank == rank:
            tell[a.item].add(b.rank)
        if a.rank != b.rank and rank in (a.rank, b.rank):
            links.add((a.rank, a.item, b.rank, b.item))

    def conflict(a: _Access, b: _Access, holder: int) -> None:
        if a.item == b.item and a.rank == b.rank:
            return  # a tile that reads and writes its own box
        if a.task == b.task:
            name = tasks[a.task].name
            raise ValueError(
                f"task {name!r}: tile {a.item - offsets[a.task]} on rank {a.rank} "
                f"and tile {b.item - offsets[b.task]} on rank {b.rank} access an "
                f"overlapping box of one tensor on rank {holder} and one of them "
                f"writes it; tiles of a task must be independent")
        first, second = (a, b) if a.task < b.task else (b, a)
        edge(first, second)

    for (_, holder), accs in by_location.items():
        for i, j in _view_conflicts(accs):
            conflict(accs[i], accs[j], holder)
        for acc in accs:
            if acc.rank == holder:
                continue
            if acc.rank == rank:  # touches another rank's memory: wait for its start
                deps[acc.item].add(world_size * n + holder)
                tell[acc.item].add(holder)
            if holder == rank:  # a peer touches mine: my call ends after it
                tail.add(acc.rank * n + acc.item)
                begin.add(acc.rank)
            if rank in (acc.rank, holder):
                links.update(((holder, -1, acc.rank, acc.item),
                              (acc.rank, acc.item, holder, -1)))
    for holder, one, other in _aliasing_views(by_location):
        frame = Frame.common(one[0].region.tensor, other[0].region.tensor)
        both = one + other
        pairs = (_unframed_conflicts(tasks, offsets, holder, one, other) if frame is None
                 else _placed_conflicts(frame, both))
        for i, j in pairs:
            if i < len(one) <= j:  # pairs within one view were found above
                conflict(both[i], both[j], holder)

    _prune(deps, rank * n)

    order: list[int] = []
    item_task: list[int] = []
    item_tile: list[int] = []
    for k, task in enumerate(tasks):
        order.extend(offsets[k] + t for t in task.tile_order(rank))
        item_task.extend([k] * task.tiles)
        item_tile.extend(range(task.tiles))
    dep_ptr, dep_slot, ntf_ptr, ntf_rank = [0], [], [0], []
    for i in range(n):
        dep_slot.extend(sorted(deps[i]))
        dep_ptr.append(len(dep_slot))
        ntf_rank.extend(sorted(tell[i]))
        ntf_ptr.append(len(ntf_rank))
    return Schedule(rank, world_size, n, order, item_task, item_tile, dep_ptr, dep_slot,
                    ntf_ptr, ntf_rank, sorted(begin), sorted(tail), frozenset(links))


def _view_conflicts(accs: list[_Access]) -> list[tuple[int, int]]:
    """Index pairs ``(i, j)``, ``i < j``, of the accesses of one view on one rank that
    conflict: boxes whose elements meet, at least one of them a write. Sorted. Where the
    view's elements share memory (``expand``: disjoint boxes may hold the same elements)
    the boxes are compared in the view's :class:`Frame`, or where it has none (``unfold``)
    by their elements' addresses (``regions_meet``), else by the bytes they span (a wait
    too many at worst)."""
    writes = [a.write for a in accs]
    if not any(writes):
        return []
    t = accs[0].region.tensor
    if not shares_memory(t):
        return _conflicting_pairs(accs)
    frame = Frame.common(t, t)
    if frame is not None:
        return _placed_conflicts(frame, accs)
    return sorted((i, j) for i, j in _meeting_spans([a.region.span for a in accs], writes)
                  if regions_meet(accs[i].region, accs[j].region) is not False)


def _placed_conflicts(frame: Frame, accs: list[_Access]) -> list[tuple[int, int]]:
    """Index pairs ``(i, j)``, ``i < j``, of the accesses (of views ``frame`` fits, on one
    rank) whose elements meet, at least one of them a write, sorted: their boxes in the
    frame intersect (a box may be placed as several)."""
    boxes, owner = [], []
    for i, a in enumerate(accs):
        for box in frame.place(a.region):
            boxes.append(box)
            owner.append(i)
    pairs = _intersecting(boxes, [accs[i].write for i in owner])
    return sorted({(owner[i], owner[j]) for i, j in pairs if owner[i] != owner[j]})


def _aliasing_views(by_location: dict) -> Iterator[tuple[int, list[_Access], list[_Access]]]:
    """``(holder, accesses of one view, of another)`` for each two views accessed on rank
    ``holder`` whose byte spans meet (views of one buffer), one of them written."""
    by_memory: dict[tuple, list[list[_Access]]] = {}
    for (_, holder), accs in by_location.items():
        device = accs[0].region.tensor.device
        if device.type != "meta":  # no memory: every meta tensor is at address 0
            by_memory.setdefault((holder, device), []).append(accs)
    for (holder, _), views in by_memory.items():
        if len(views) < 2:
            continue
        spans = [byte_span(accs[0].region.tensor) for accs in views]
        writes = [any(a.write for a in accs) for accs in views]
        for i, j in _meeting_spans(spans, writes):
            yield holder, views[i], views[j]


def _view(t: torch.Tensor) -> str:
    return (f"the {str(t.dtype).removeprefix('torch.')} view of shape {tuple(t.shape)}, "
            f"strides {tuple(t.stride())}, offset {t.storage_offset()}")


def _unframed_conflicts(tasks: Sequence[Task], offsets: list[int], holder: int,
                        one: list[_Access], other: list[_Access]) -> list[tuple[int, int]]:
    """Index pairs ``(i, j)`` into ``one + other`` (views that no :class:`Frame` places
    both) of an access to each view whose elements meet, one of them a write, told by
    their addresses (``regions_meet``). Raises ``ValueError`` where two accesses of
    different tiles meet in bytes spanned but cannot be compared so: whether their
    elements meet is not worked out, so the wait might be missing."""
    both = one + other
    pairs = []
    for i, j in _meeting_spans([a.region.span for a in both], [a.write for a in both]):
        a, b = both[i], both[j]
        if (i < len(one)) == (j < len(one)) or (a.item == b.item and a.rank == b.rank):
            continue
        meet = regions_meet(a.region, b.region)
        if meet:
            pairs.append((i, j))
        if meet is not None:
            continue
        words = [f"task {tasks[x.task].name!r} tile {x.item - offsets[x.task]} on rank "
                 f"{x.rank} {'writes' if x.write else 'reads'} {_view(x.region.tensor)}"
                 for x in (a, b)]
        raise ValueError(
            f"{words[0]}, and {words[1]}: two views of one buffer on rank {holder} whose "
            f"boxes meet in memory but cannot be compared (no strided frame places both, "
            f"and neither box is made of few runs of bytes that the other's ordered "
            f"elements can be searched for: overlapping windows, or boxes of more than "
            f"{RUNS_MAX} runs), so the wait between them cannot be derived; name the "
            f"buffer by one tensor in every region (or by views that are slices of one "
            f"another)")
    return sorted(pairs)


def _meeting_spans(spans: list[tuple[int, int]], writes: list[bool]
                   ) -> Iterator[tuple[int, int]]:
    """Index pairs ``(i, j)``, ``i < j``, of the half-open spans that meet, at least one of
    them a write; each once, in no order."""
    active: list[tuple[int, int]] = []  # (end, index), a heap
    for i in sorted(range(len(spans)), key=lambda k: spans[k]):
        lo, hi = spans[i]
        while active and active[0][0] <= lo:
            heapq.heappop(active)
        for _, j in active:
            if writes[i] or writes[j]:
                yield min(i, j), max(i, j)
        heapq.heappush(active, (hi, i))


#: at most this many cells in the grid that ``_intersecting`` buckets boxes on
_GRID_CELLS = 4096


def _conflicting_pairs(accs: list[_Access]) -> list[tuple[int, int]]:
    """Index pairs ``(i, j)``, ``i < j``, of the accesses (of one view on one rank) whose
    boxes intersect and of which at least one writes, sorted (:func:`_intersecting`)."""
    return _intersecting([a.region.box for a in accs], [a.write for a in accs])


def _intersecting(boxes: list[tuple[Range, ...]], writes: list[bool]
                  ) -> list[tuple[int, int]]:
    """Index pairs ``(i, j)``, ``i < j``, of the boxes (of as many dimensions) that
    intersect, at least one of them a write, sorted.

    Only boxes that share a cell of a grid over them are compared: a cell is, per
    dimension, as long as the shortest box (a box covers few cells) unless that would make
    more than ``_GRID_CELLS`` cells. Read-only tensors (weights) cost nothing."""
    if not any(writes):
        return []
    ndim = len(boxes[0])
    per_dim = max(1, int(_GRID_CELLS ** (1 / ndim))) if ndim else 1
    cells, starts = [], []  # coordinates may be negative (a frame's top digit)
    for d in range(ndim):
        shortest = min(hi - lo for lo, hi in (b[d] for b in boxes))
        start = min(b[d][0] for b in boxes)
        end = max(b[d][1] for b in boxes)
        cells.append(max(1, shortest, -(-(end - start) // per_dim)))
        starts.append(start)
    grid: dict[tuple[int, ...], list[int]] = {}
    for i, box in enumerate(boxes):
        spans = [range((lo - s) // c, (hi - 1 - s) // c + 1)
                 for (lo, hi), c, s in zip(box, cells, starts, strict=True)]
        for key in itertools.product(*spans):
            grid.setdefault(key, []).append(i)
    pairs: set[tuple[int, int]] = set()
    for members in grid.values():
        for i in members:
            if writes[i]:
                pairs.update((min(i, j), max(i, j)) for j in members if j != i)
    return sorted(p for p in pairs if boxes_meet(boxes[p[0]], boxes[p[1]]))


def _prune(deps: list[set[int]], first: int) -> None:
    """Drop the waits an item's other waits already imply: if the item waits for local item
    ``d`` and ``d`` itself waited for slot ``s``, the item need not wait for ``s`` (release
    and acquire chain: ``s`` set, ``d`` saw it, then set its own slot). One level, with the
    unpruned sets of the local items."""
    n = len(deps)
    implied = []
    for i in range(n):
        covered: set[int] = set()
        for d in deps[i]:
            if first <= d < first + n:
                covered |= deps[d - first]
        implied.append(covered)
    for i in range(n):
        deps[i] -= implied[i]


def describe_slot(tasks: Sequence[Task], schedule: Schedule, slot: int) -> str:
    """What scoreboard slot ``slot`` of ``schedule`` stands for, in words (for timeout
    errors)."""
    rank, item = schedule.setter(slot)
    if item is None:
        return f"the start of rank {rank}'s call"
    return describe_item(tasks, rank, item) or f"slot {slot}"


def describe_item(tasks: Sequence[Task], rank: int, item: int) -> str | None:
    """Item ``item`` (a tile in program order over ``tasks``) of ``rank`` in words; ``None``
    past the last task's tiles."""
    for task in tasks:
        if item < task.tiles:
            return f"task {task.name!r} tile {item} on rank {rank}"
        item -= task.tiles
    return None


class TaskGraph:
    """Tasks in program order; :meth:`compile` makes them one persistent megakernel.

    ``graph.add(name, fn, *args, tiles=n, reads=..., writes=..., order=..., warps=...)``
    registers the tile function ``fn(tile, *args)`` for ``n`` tiles (see :class:`Task`;
    ``reads`` and ``writes`` map ``(tile, rank)`` to regions, ``order`` maps a rank to its
    tile order, a distributed swizzle; ``warps``: the ``num_warps`` its tiles were sized
    for, see :meth:`num_warps`). Every rank builds the same graph.
    """

    def __init__(self, name: str = "megakernel") -> None:
        self.name = name
        self.tasks: list[Task] = []

    def add(self, name: str, fn, *args, tiles: int, reads: Regions | None = None,
            writes: Regions | None = None,
            order: Callable[[int], Sequence[int]] | None = None, warps: int | None = None,
            **kwargs) -> Task:
        if any(t.name == name for t in self.tasks):
            raise ValueError(f"graph {self.name!r} already has a task named {name!r}")
        task = Task.make(name, fn, args, kwargs, tiles=tiles, reads=reads, writes=writes,
                         order=order, warps=warps)
        self.tasks.append(task)
        return task

    def num_warps(self) -> int:
        """The megakernel's ``num_warps`` unless ``compile`` is told: the most any task
        asked for (the whole kernel runs with one count, and tiles sized for more warps
        than they get spill their accumulators), else ``DEFAULT_WARPS``."""
        return max((t.warps for t in self.tasks if t.warps is not None),
                   default=DEFAULT_WARPS)

    def schedule(self, rank: int, world_size: int, **kw) -> Schedule:
        """``rank``'s schedule in a world of ``world_size`` ranks (host only; see
        :func:`derive`)."""
        return derive(self.tasks, rank, world_size, **kw)

    def compile(self, **kw):
        """The megakernel of this graph on the current world (collective); see
        :func:`ditron.task.megakernel.compile_graph` for the options."""
        from .megakernel import compile_graph

        return compile_graph(self, **kw)

    def __str__(self) -> str:
        lines = [f"TaskGraph {self.name!r}: {len(self.tasks)} tasks, "
                 f"{sum(t.tiles for t in self.tasks)} tiles"]
        for t in self.tasks:
            lines.append(f"  {t.name}: {t.fn.fn.__name__} x {t.tiles} tiles")
        return "\n".join(lines)
