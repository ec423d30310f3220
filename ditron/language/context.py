"""The device context: what every Ditron primitive needs to reach other ranks.

A kernel takes one ``ctx`` argument (a :class:`DeviceContext`, built on the host by
``ditron.context()``) and passes it to the primitives. Triton flattens the named tuple
into scalar and pointer arguments, so the context costs nothing beyond its five fields.
"""

from __future__ import annotations

from typing import Any, NamedTuple

# Slots of the diagnostic record (int64 words) that a timed-out ``wait`` fills in.
DIAG_FLAG = 0  # 0: clear; 1: a wait timed out
DIAG_RANK = 1  # rank that timed out
DIAG_OFFSET = 2  # byte offset of the signal in the symmetric heap
DIAG_EXPECTED = 3  # value the wait needed
DIAG_SEEN = 4  # last value it read
DIAG_LIMIT = 5  # its poll budget (``spin_limit``): the host turns it into seconds
DIAG_SCRATCH = 7  # word used by ``fence``
DIAG_WORDS = 8


class DeviceContext(NamedTuple):
    """Kernel-side view of the world of ranks.

    Fields:
        heap_bases: int64 tensor ``[world_size]``; entry ``r`` is the address of rank ``r``'s
            symmetric heap in this process's address space (0 for ranks on other nodes).
        rank: this process's rank.
        world_size: number of ranks.
        diag: int64 tensor ``[DIAG_WORDS]`` in local memory: the record a timed-out ``wait``
            writes for the host to raise.
        spin_limit: how many polls a ``wait`` makes before it gives up (0: wait forever).
    """

    heap_bases: Any
    rank: int
    world_size: int
    diag: Any
    spin_limit: int
