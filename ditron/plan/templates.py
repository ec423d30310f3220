"""Plan templates: the common collectives as chunk plans (see ``ir.py``).

Row layout: rank ``r`` owns rows ``[offsets[r], offsets[r+1])`` of the logical tensor, with
``rows_per_rank`` an int (equal shards) or a list (uneven shards, zero allowed).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence, Set

from ..runtime.integers import as_int, check_int
from .ir import MODES, Chunk, Plan, Transfer, check


def shard_offsets(rows_per_rank: int | Sequence[int], world_size: int) -> list[int]:
    """Row offsets ``[0, ..., total]`` of the ranks' shards (``world_size + 1`` ints).
    ``rows_per_rank``: an int, or the sizes in rank order (a list, a tuple, a NumPy array;
    a mapping or a set, whose iteration gives keys or no order, is refused)."""
    world_size = check_int(world_size, "world_size", 1)
    equal = as_int(rows_per_rank)
    if equal is not None:
        sizes = [equal] * world_size
    elif isinstance(rows_per_rank, (Mapping, Set, str, bytes, bytearray)):
        sizes = []
    else:
        try:
            sizes = [as_int(s) for s in rows_per_rank]
        except TypeError:
            sizes = []
    if len(sizes) != world_size or any(s is None or s < 0 for s in sizes):
        raise ValueError(f"rows_per_rank must give {world_size} non-negative int sizes, "
                         f"got {rows_per_rank!r}")
    offs = [0]
    for s in sizes:
        offs.append(offs[-1] + s)
    return offs


def _shard_chunks(offs: list[int]) -> list[Chunk]:
    return [Chunk(r, offs[r], offs[r + 1], r) for r in range(len(offs) - 1)]


def all_gather(rows_per_rank: int | Sequence[int], world_size: int, *, order: str = "swizzled",
               mode: str = "pull", tensor: str = "A") -> Plan:
    """1D all-gather: every rank receives every other rank's shard directly.

    ``order="rank"``: each rank receives shards ``0, 1, ...``; ``"swizzled"``: rank ``r``
    receives ``r+1, r+2, ...`` first (every source is busy with a different destination at
    each step, and the consumer GEMM follows the same order). The transfers are listed step
    by step (step ``i``: every rank's ``i``-th arrival), so each rank's issue order, as
    puller (``mode="pull"``) or as pusher (``"push"``: rank ``s`` pushes to ``s-1, s-2,
    ...`` when swizzled), delivers the shards in that order.
    """
    if order not in ("rank", "swizzled"):
        raise ValueError(f"all_gather order must be 'rank' or 'swizzled', got {order!r}")
    if mode not in MODES:
        raise ValueError(f"all_gather mode must be one of {MODES}, got {mode!r}")
    offs = shard_offsets(rows_per_rank, world_size)
    if order == "rank":
        srcs = [[s for s in range(world_size) if s != dst] for dst in range(world_size)]
    else:
        srcs = [[(dst + i) % world_size for i in range(1, world_size)]
                for dst in range(world_size)]
    transfers: list[Transfer] = []
    for step in range(world_size - 1):
        for dst in range(world_size):
            src = srcs[dst][step]
            transfers.append(Transfer(len(transfers), src, src, dst, mode=mode))
    return Plan(f"all_gather[{order},{mode}]", tensor, offs[-1], world_size, _shard_chunks(offs),
                transfers)


def all_gather_2d(rows_per_rank: int | Sequence[int], world_size: int, local_world_size: int,
                  *, tensor: str = "A") -> Plan:
    """Hierarchical all-gather across nodes of ``local_world_size`` ranks each (it divides
    ``world_size``: with a shorter last node the ops take their plain path instead).

    Stage 1 (``inter``, collective over the network): rank ``r`` receives the shards of the
    ranks with its local index on the other nodes. Stage 2 (``intra``, pull): rank ``r``
    pulls every other shard from the rank of its own node that holds it after stage 1.
    """
    world_size = check_int(world_size, "world_size", 1)
    L = as_int(local_world_size)
    if L is None or not 1 <= L <= world_size or world_size % L:
        raise ValueError(f"local_world_size must divide the world size {world_size} (nodes "
                         f"of equal size), got {local_world_size!r}")
    offs = shard_offsets(rows_per_rank, world_size)
    transfers: list[Transfer] = []
    landed: dict[tuple[int, int], int] = {}  # (shard, holder) -> transfer id
    for r in range(world_size):
        node = r // L
        for q in range(r % L, world_size, L):
            if q // L != node:
                landed[(q, r)] = len(transfers)
                transfers.append(Transfer(len(transfers), q, q, r, mode="pull",
                                          kind="collective", level="inter"))
    for r in range(world_size):
        node_start = (r // L) * L
        for i in range(1, world_size):
            q = (r + i) % world_size
            holder = node_start + q % L
            if holder == r or holder >= world_size:
                continue
            dep = landed.get((q, holder))
            transfers.append(Transfer(len(transfers), q, holder, r, mode="pull",
                                      after=(dep,) if dep is not None else ()))
    plan = Plan("all_gather_2d", tensor, offs[-1], world_size, _shard_chunks(offs), transfers,
                local_world_size=L)
    check(plan)
    return plan


def reduce_scatter(rows_per_rank: int | Sequence[int], world_size: int, *,
                   tensor: str = "C") -> Plan:
    """Reduce-scatter: every rank pushes its partial of shard ``d`` into rank ``d``, which
    sums them; rank ``s`` serves ``s+1, s+2, ...`` in that order (scatter order). Over more
    than two ranks the partials of a chunk land at once: ``lowering.engine_transfers``
    refuses it (the engines sum without atomics)."""
    offs = shard_offsets(rows_per_rank, world_size)
    transfers: list[Transfer] = []
    for src in range(world_size):
        for i in range(1, world_size):
            dst = (src + i) % world_size
            transfers.append(Transfer(len(transfers), dst, src, dst, mode="push", reduce=True))
    return Plan("reduce_scatter", tensor, offs[-1], world_size, _shard_chunks(offs), transfers)


def all_reduce(rows_per_rank: int | Sequence[int], world_size: int, *,
               tensor: str = "C") -> Plan:
    """Two-shot all-reduce: the reduce-scatter above, then each owner pushes its reduced
    shard to every peer once every partial of it has landed."""
    rs = reduce_scatter(rows_per_rank, world_size, tensor=tensor)
    transfers = list(rs.transfers)
    into = {d: [t.id for t in rs.transfers if t.dst == d] for d in range(world_size)}
    for src in range(world_size):
        for i in range(1, world_size):
            dst = (src + i) % world_size
            transfers.append(Transfer(len(transfers), src, src, dst, mode="push",
                                      after=tuple(into[src])))
    return Plan("all_reduce", tensor, rs.rows, world_size, rs.chunks, transfers)


def ring_all_gather(rows_per_rank: int | Sequence[int], world_size: int, *,
                    tensor: str = "A") -> Plan:
    """Ring all-gather: at step ``s`` rank ``r`` pushes shard ``(r - s) % W`` to ``r + 1``,
    after that shard reached ``r`` at step ``s - 1``."""
    offs = shard_offsets(rows_per_rank, world_size)
    transfers: list[Transfer] = []
    prev: dict[tuple[int, int], int] = {}  # (shard, holder) -> transfer that brought it
    for step in range(world_size - 1):
        for r in range(world_size):
            shard = (r - step) % world_size
            dst = (r + 1) % world_size
            dep = prev.get((shard, r))
            prev[(shard, dst)] = len(transfers)
            transfers.append(Transfer(len(transfers), shard, r, dst, mode="push",
                                      after=(dep,) if dep is not None else ()))
    plan = Plan("ring_all_gather", tensor, offs[-1], world_size, _shard_chunks(offs), transfers)
    check(plan)
    return plan
