"""A per-process cache of host metadata keyed by call signature, bounded in size.

Ops cache what they derive per shape (tile orders, plans, decisions, which signatures the
ranks agreed on) so that a repeated call skips the work. A workload whose shapes keep
changing (inference with a varying number of tokens) would grow such a cache without end,
so :class:`BoundedCache` keeps at most ``capacity`` entries and evicts the least recently
used. Every rank makes the same calls in the same order, so every rank evicts the same
entries: an entry whose absence makes a rank communicate again (an agreement, a decision)
is missing on all ranks at once. Entries a CUDA graph may point into (device tensors used
by a captured call) are *pinned* and never evicted: a replay would read freed memory.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Any


class BoundedCache:
    """At most ``capacity`` unpinned entries, least recently used evicted first; pinned
    entries kept until :meth:`drop`. Not thread-safe (one per rank process)."""

    def __init__(self, capacity: int) -> None:
        self._lru: OrderedDict[Hashable, Any] = OrderedDict()
        self._pinned: dict[Hashable, Any] = {}
        self.resize(capacity)

    def __len__(self) -> int:
        return len(self._lru) + len(self._pinned)

    def __contains__(self, key: Hashable) -> bool:
        return key in self._pinned or key in self._lru

    def keys(self) -> list[Hashable]:
        """Every key, pinned ones last (a copy: the cache may change while it is used)."""
        return [*self._lru, *self._pinned]

    def get(self, key: Hashable, default: Any = None) -> Any:
        """The entry ``key`` (now the most recently used), else ``default``."""
        if key in self._pinned:
            return self._pinned[key]
        value = self._lru.get(key, _MISSING)
        if value is _MISSING:
            return default
        self._lru.move_to_end(key)
        return value

    def put(self, key: Hashable, value: Any, *, pinned: bool = False) -> Any:
        """Store ``value`` under ``key`` (``pinned``: never evicted; an entry once pinned
        stays pinned) and return it; evicts the least recently used unpinned entry past
        ``capacity``."""
        if pinned or key in self._pinned:
            self._lru.pop(key, None)
            self._pinned[key] = value
            return value
        self._lru[key] = value
        self._lru.move_to_end(key)
        self._trim()
        return value

    def resize(self, capacity: int) -> None:
        """Keep at most ``capacity`` unpinned entries from now on (evicting the least
        recently used past it)."""
        if capacity < 1:
            raise ValueError(f"BoundedCache: capacity must be >= 1, got {capacity}")
        self.capacity = capacity
        self._trim()

    def _trim(self) -> None:
        while len(self._lru) > self.capacity:
            self._lru.popitem(last=False)

    def pin(self, key: Hashable) -> None:
        """Pin the entry ``key`` if present (a CUDA graph now uses it)."""
        value = self._lru.pop(key, _MISSING)
        if value is not _MISSING:
            self._pinned[key] = value

    def get_or_make(self, key: Hashable, make: Callable[[], Any], *,
                    pinned: bool = False) -> Any:
        """The entry ``key``, made by ``make()`` and stored when missing; pinned when
        ``pinned`` (also an entry that existed)."""
        value = self.get(key, _MISSING)
        if value is _MISSING:
            return self.put(key, make(), pinned=pinned)
        if pinned:
            self.pin(key)
        return value

    def drop(self, where: Callable[[Hashable], bool]) -> int:
        """Remove every entry (pinned too) whose key satisfies ``where``; return how many."""
        gone = [k for k in self.keys() if where(k)]
        for k in gone:
            self._lru.pop(k, None)
            self._pinned.pop(k, None)
        return len(gone)


_MISSING = object()

#: entries a named cache keeps (unpinned): a few per call signature, for a thousand or so
#: signatures
DEFAULT_CAPACITY = 4096


def named(name: str, capacity: int | None = None) -> BoundedCache:
    """The world's cache called ``name``, made on first use with ``capacity`` entries
    (default :data:`DEFAULT_CAPACITY`) and dropped with the world; a ``capacity`` given
    for a cache that exists resizes it."""
    from .world import current

    cache = current().cache
    found = cache.get(("bounded_cache", name))
    if found is None:
        found = cache[("bounded_cache", name)] = BoundedCache(
            DEFAULT_CAPACITY if capacity is None else capacity)
    elif capacity is not None:
        found.resize(capacity)
    return found


__all__ = ["DEFAULT_CAPACITY", "BoundedCache", "named"]
