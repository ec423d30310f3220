"""The chunk plan IR: which rows of a tensor move from which rank to which, after what.

A :class:`Chunk` is a row range ``[start, stop)`` of a logical tensor (the gathered A of
AG-GEMM, the output C of GEMM-RS), whose data belongs to ``owner`` (the rank that has it
first in a gather, the rank that receives its sum in a scatter). Chunk ids are signal slots:
the chunk's signal on the receiving rank reaches the call's epoch when the chunk has landed.

A :class:`Transfer` moves one chunk from ``src`` to ``dst``: ``push`` (issued by ``src``) or
``pull`` (issued by ``dst``), ``p2p`` or part of a ``collective`` (the network engine moves
it with its peers), optionally summing into the destination (``reduce``, a bool), on the ``intra``
node or ``inter`` node level, and only after the transfers listed in ``after`` have landed.
The order of a rank's transfers in :attr:`Plan.transfers` is its issue order.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping

from ..runtime.integers import as_int, check_int

MODES = ("push", "pull")
KINDS = ("p2p", "collective")
LEVELS = ("intra", "inter")


def _ints(obj, what: str, names: tuple[str, ...]) -> None:
    """Make the fields ``names`` of frozen ``obj`` plain ints, or ``ValueError`` naming it."""
    for name in names:
        value = as_int(getattr(obj, name))
        if value is None:
            raise ValueError(f"{what} {name} must be an int, got {getattr(obj, name)!r}")
        object.__setattr__(obj, name, value)


@dataclasses.dataclass(frozen=True)
class Chunk:
    id: int
    start: int
    stop: int
    owner: int

    def __post_init__(self):
        _ints(self, "chunk", ("id", "start", "stop", "owner"))

    @property
    def rows(self) -> int:
        return self.stop - self.start


@dataclasses.dataclass(frozen=True)
class Transfer:
    id: int
    chunk: int
    src: int
    dst: int
    mode: str = "pull"
    kind: str = "p2p"
    reduce: bool = False
    after: tuple[int, ...] = ()
    level: str = "intra"

    def __post_init__(self):
        _ints(self, "transfer", ("id", "chunk", "src", "dst"))
        try:
            after = tuple(as_int(d) for d in self.after)
        except TypeError:
            after = (None,)
        if None in after:
            raise ValueError(f"transfer {self.id}: after must list transfer ids (ints), got "
                             f"{self.after!r}")
        object.__setattr__(self, "after", after)
        if self.src == self.dst:
            raise ValueError(f"transfer {self.id} goes from rank {self.src} to itself (a "
                             f"copy onto its own rows; summed, a partial added twice)")
        if self.reduce not in (True, False):  # a "False" string would sum
            raise ValueError(f"transfer {self.id}: reduce must be a bool, got {self.reduce!r}")
        object.__setattr__(self, "reduce", bool(self.reduce))
        if self.mode not in MODES:
            raise ValueError(f"transfer mode must be one of {MODES}, got {self.mode!r}")
        if self.kind not in KINDS:
            raise ValueError(f"transfer kind must be one of {KINDS}, got {self.kind!r}")
        if self.level not in LEVELS:
            raise ValueError(f"transfer level must be one of {LEVELS}, got {self.level!r}")

    @property
    def issuer(self) -> int:
        return self.src if self.mode == "push" else self.dst


@dataclasses.dataclass(frozen=True)
class Plan:
    """A chunk plan over ``world_size`` ranks for a logical tensor of ``rows`` rows.

    Built checked (``ValueError``): ``local_world_size`` divides ``world_size`` (nodes of
    equal size; ``0``: one node); chunks numbered ``0..`` in order, each a row range owned
    by a rank, that together cover ``[0, rows)`` once (no row in two chunks, none in no
    chunk; chunks of zero rows anywhere); transfers numbered ``0..`` in order, each between
    two different ranks of the world (of one node if ``intra``), of a known chunk,
    ``after`` naming other transfers by id with no cycle (a transfer waiting, through
    others, for itself never starts); a transfer that copies (not sums) a chunk goes from
    a rank that holds it: its owner, or one that a transfer it waits for (directly or
    through others) brought it to. A dependency on a later transfer is allowed here, but
    :func:`check` refuses it.

    Immutable once built (a frozen dataclass; ``chunks`` and ``transfers``, given as any
    sequence, are kept as tuples), so a checked plan stays checked."""

    name: str
    tensor: str
    rows: int
    world_size: int
    chunks: tuple[Chunk, ...]
    transfers: tuple[Transfer, ...]
    local_world_size: int = 0

    def __post_init__(self):
        W = check_int(self.world_size, "plan world_size", 1)
        object.__setattr__(self, "world_size", W)
        object.__setattr__(self, "rows", check_int(self.rows, "plan rows"))
        L = as_int(self.local_world_size)
        if L == 0:
            L = W
        if L is None or not 1 <= L <= W or W % L:
            raise ValueError(f"plan local_world_size must divide the world size {W} (nodes "
                             f"of equal size; 0: one node), got {self.local_world_size!r}")
        object.__setattr__(self, "local_world_size", L)
        for field, kind in (("chunks", Chunk), ("transfers", Transfer)):
            try:
                items = tuple(getattr(self, field))
            except TypeError:
                items = None
            if items is None or not all(isinstance(x, kind) for x in items):
                raise ValueError(f"plan {field} must be a sequence of {kind.__name__}s, got "
                                 f"{getattr(self, field)!r}")
            object.__setattr__(self, field, items)
        ids = [c.id for c in self.chunks]
        if ids != list(range(len(ids))):
            raise ValueError("plan chunks must be numbered 0.. in order")
        for c in self.chunks:
            if not (0 <= c.start <= c.stop <= self.rows and 0 <= c.owner < W):
                raise ValueError(f"chunk {c.id}: rows [{c.start}, {c.stop}) of rank {c.owner} "
                                 f"do not fit {self.rows} rows over {W} ranks")
        _check_coverage(self)
        if [t.id for t in self.transfers] != list(range(len(self.transfers))):
            raise ValueError("plan transfers must be numbered 0.. in order")
        for t in self.transfers:
            if not 0 <= t.chunk < len(self.chunks):
                raise ValueError(f"transfer {t.id} names unknown chunk {t.chunk}")
            if not (0 <= t.src < W and 0 <= t.dst < W):
                raise ValueError(f"transfer {t.id} goes from rank {t.src} to rank {t.dst}, "
                                 f"outside the plan's {W} ranks")
            if t.level == "intra" and t.src // L != t.dst // L:
                raise ValueError(f"transfer {t.id} goes from rank {t.src} to rank {t.dst}, "
                                 f"on another node (nodes of {L} ranks), but is intra-node: "
                                 f"the engines cannot reach that rank's memory (level='inter')")
            for dep in t.after:
                if not 0 <= dep < len(self.transfers):
                    raise ValueError(f"transfer {t.id} depends on {dep}, which is not a "
                                     f"transfer of the plan (0..{len(self.transfers) - 1})")
                if dep == t.id:
                    raise ValueError(f"transfer {t.id} depends on itself: it would never start")
        _check_acyclic(self)
        _check_held(self)

    @property
    def num_chunks(self) -> int:
        return len(self.chunks)

    def issued_by(self, rank: int) -> list[Transfer]:
        """The transfers ``rank`` issues, in issue order."""
        return [t for t in self.transfers if t.issuer == rank]

    def incoming(self, rank: int) -> list[Transfer]:
        """The transfers that land on ``rank``, in plan order."""
        return [t for t in self.transfers if t.dst == rank]

    def arrival_order(self, rank: int) -> list[int]:
        """Owners of the chunks landing on ``rank`` in plan order, each once."""
        seen: list[int] = []
        for t in self.incoming(rank):
            owner = self.chunks[t.chunk].owner
            if owner not in seen and owner != rank:
                seen.append(owner)
        return seen

    def chunks_of(self, owner: int) -> list[Chunk]:
        return [c for c in self.chunks if c.owner == owner]

    def __str__(self) -> str:
        lines = [f"plan {self.name}: {self.tensor}[{self.rows} rows] over {self.world_size} "
                 f"ranks ({self.local_world_size} per node), {self.num_chunks} chunks, "
                 f"{len(self.transfers)} transfers"]
        for c in self.chunks:
            lines.append(f"  chunk {c.id}: rows [{c.start}, {c.stop}) of rank {c.owner}")
        for t in self.transfers:  # "rank 0 -> rank 1": from 0 into 1, copied or summed
            what = "summed" if t.reduce else "copied"
            dep = f" after [{', '.join(f't{d}' for d in t.after)}]" if t.after else ""
            lines.append(f"  t{t.id}: chunk {t.chunk}, rank {t.src} -> rank {t.dst} {what} "
                         f"({t.mode} by {t.issuer}, {t.kind}, {t.level}){dep}")
        return "\n".join(lines)


def _check_coverage(plan: Plan) -> None:
    """``ValueError`` unless the chunks of rows cover ``[0, plan.rows)`` once."""
    row, last = 0, None
    for c in sorted((c for c in plan.chunks if c.rows), key=lambda c: (c.start, c.id)):
        if c.start < row:
            raise ValueError(f"plan {plan.name}: chunks {last.id} and {c.id} overlap (rows "
                             f"[{last.start}, {last.stop}) and [{c.start}, {c.stop})): a row "
                             f"belongs to one chunk, whose signal says it has landed")
        if c.start > row:
            raise ValueError(f"plan {plan.name}: rows [{row}, {c.start}) are in no chunk "
                             f"(the chunks must cover the plan's {plan.rows} rows)")
        row, last = c.stop, c
    if row != plan.rows:
        raise ValueError(f"plan {plan.name}: rows [{row}, {plan.rows}) are in no chunk (the "
                         f"chunks must cover the plan's {plan.rows} rows)")


def find_cycle(waits: Mapping[int, Iterable[int]]) -> list[int] | None:
    """A cycle of ``waits`` (each node's list of the nodes it waits for), as the path
    ``[a, b, ..., a]`` through it, or ``None`` where there is none (an iterative
    depth-first search: plans of 10**5 transfers pass Python's recursion limit)."""
    state = dict.fromkeys(waits, 0)  # 0: not seen, 1: on the path, 2: done
    for root in waits:
        if state[root]:
            continue
        path, stack = [root], [iter(waits[root])]
        state[root] = 1
        while stack:
            dep = next(stack[-1], None)
            if dep is None:
                state[path.pop()] = 2
                stack.pop()
            elif state[dep] == 1:
                return [*path[path.index(dep):], dep]
            elif state[dep] == 0:
                state[dep] = 1
                path.append(dep)
                stack.append(iter(waits[dep]))
    return None


def _check_acyclic(plan: Plan) -> None:
    """``ValueError`` naming a cycle of ``after`` dependencies, if there is one."""
    cycle = find_cycle({t.id: t.after for t in plan.transfers})
    if cycle is not None:
        raise ValueError(f"plan {plan.name}: transfers {' -> '.join(map(str, cycle))} "
                         f"form a cycle (each depends on the next): none of them "
                         f"would ever start")


def _check_held(plan: Plan) -> None:
    """``ValueError`` for a transfer that copies a chunk from a rank not holding it (not its
    owner, and no transfer it waits for, directly or through others, brought it there): it
    would move rows that have not landed. A summing transfer moves the sender's partial."""
    for t in plan.transfers:
        if t.reduce or plan.chunks[t.chunk].owner == t.src:
            continue
        todo, seen = list(t.after), set()
        while todo:
            u = plan.transfers[todo.pop()]
            if u.chunk == t.chunk and u.dst == t.src:
                break
            if u.id not in seen:
                seen.add(u.id)
                todo += u.after
        else:
            raise ValueError(f"plan {plan.name}: transfer {t.id} copies chunk {t.chunk} from "
                             f"rank {t.src}, which does not hold it (rank "
                             f"{plan.chunks[t.chunk].owner} owns it, and no transfer that "
                             f"{t.id} waits for brings it to rank {t.src}): it would move "
                             f"rows that have not landed")


def _pieces(chunk: Chunk, chunk_rows: int) -> list[tuple[int, int]]:
    if chunk.rows <= 0:
        return [(chunk.start, chunk.stop)]
    return [(s, min(s + chunk_rows, chunk.stop)) for s in range(chunk.start, chunk.stop,
                                                                  chunk_rows)]


def split(plan: Plan, chunk_rows: int) -> Plan:
    """Refine every chunk into pieces of at most ``chunk_rows`` rows, numbered in row order
    (a chunk of zero rows stays one piece, before the chunk that starts at its row).

    Each transfer becomes one transfer per piece. A dependency on a transfer of the same
    chunk becomes a dependency on the same piece (pipelining); a dependency on another chunk
    becomes a dependency on all of its pieces. The plan must pass :func:`check`.
    """
    if as_int(chunk_rows) is None or chunk_rows <= 0:
        raise ValueError(f"split: chunk_rows must be a positive int, got {chunk_rows!r}")
    check(plan)
    new_chunks: list[Chunk] = []
    pieces_of: dict[int, list[int]] = {}
    # row order; a chunk of zero rows goes before the one starting where it lies
    for c in sorted(plan.chunks, key=lambda c: (c.start, c.stop, c.id)):
        ids = []
        for start, stop in _pieces(c, chunk_rows):
            ids.append(len(new_chunks))
            new_chunks.append(Chunk(len(new_chunks), start, stop, c.owner))
        pieces_of[c.id] = ids
    # renumbering above follows row order; map old ids in the original order
    new_transfers: list[Transfer] = []
    tid_of: dict[tuple[int, int], int] = {}
    for t in plan.transfers:
        for i, piece in enumerate(pieces_of[t.chunk]):
            tid_of[(t.id, i)] = len(new_transfers)
            after: list[int] = []
            for dep in t.after:
                dep_t = plan.transfers[dep]
                n = len(pieces_of[dep_t.chunk])
                if dep_t.chunk == t.chunk and i < n:
                    after.append(tid_of[(dep, i)])
                else:
                    after.extend(tid_of[(dep, j)] for j in range(n))
            new_transfers.append(dataclasses.replace(t, id=len(new_transfers), chunk=piece,
                                                     after=tuple(after)))
    return Plan(f"{plan.name}/split{chunk_rows}", plan.tensor, plan.rows, plan.world_size,
                new_chunks, new_transfers, plan.local_world_size)


def check(plan: Plan) -> None:
    """Raise ``ValueError`` if a dependency points forward or at a missing transfer."""
    for t in plan.transfers:
        for dep in t.after:
            if not 0 <= dep < t.id:
                raise ValueError(f"transfer {t.id} depends on {dep}, which is not earlier")


def chunks_covering(plan: Plan, start: int, stop: int) -> Iterable[Chunk]:
    """Chunks whose rows intersect ``[start, stop)``."""
    return (c for c in plan.chunks if c.start < stop and start < c.stop and c.rows > 0)
