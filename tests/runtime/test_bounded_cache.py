from __future__ import annotations

import types

import pytest

from ditron.runtime import bounded_cache
from ditron.runtime.bounded_cache import BoundedCache


def test_least_recently_used_entries_go_first():
    c = BoundedCache(3)
    for k in "abc":
        c.put(k, k.upper())
    assert c.get("a") == "A"  # now the most recent: b is the oldest
    c.put("d", "D")
    assert "b" not in c and [k for k in "acd" if k in c] == ["a", "c", "d"]
    assert c.get("b", "gone") == "gone" and len(c) == 3
    c.put("c", "C2")  # replacing refreshes
    c.put("e", "E")
    assert "a" not in c and c.get("c") == "C2"


def test_pinned_entries_stay_and_do_not_count():
    c = BoundedCache(2)
    c.put("graph", 1, pinned=True)
    c.put("x", 2)
    c.pin("x")  # a CUDA graph now uses it
    c.pin("absent")  # nothing to pin: no error, nothing stored
    for i in range(10):
        c.put(i, i)
    assert c.get("graph") == 1 and c.get("x") == 2 and "absent" not in c
    assert len(c) == 4  # two pinned, the two newest of the rest
    c.put("x", 3)  # stays pinned when replaced
    for i in range(10, 20):
        c.put(i, i)
    assert c.get("x") == 3
    assert c.drop(lambda k: isinstance(k, str)) == 2 and "graph" not in c and len(c) == 2


def test_get_or_make_makes_once():
    c = BoundedCache(4)
    made = []
    for _ in range(3):
        assert c.get_or_make("k", lambda: made.append(1) or "v") == "v"
    assert made == [1]
    c.get_or_make("k", lambda: "other", pinned=True)
    for i in range(8):
        c.put(i, i)
    assert c.get("k") == "v"  # pinned by the last get_or_make


def test_capacity_must_be_positive():
    with pytest.raises(ValueError, match="capacity must be >= 1, got 0"):
        BoundedCache(0)


def test_resize_evicts_past_the_new_capacity():
    c = BoundedCache(4)
    for i in range(4):
        c.put(i, i)
    c.put("p", 0, pinned=True)
    c.resize(2)
    assert c.keys() == [2, 3, "p"]
    with pytest.raises(ValueError, match="capacity must be >= 1, got -1"):
        c.resize(-1)


def test_named_cache_refuses_a_capacity_of_zero_when_made(monkeypatch):
    """``named(name, 0)`` made a cache of the default capacity (``capacity or ...``), and
    raised only when the cache existed."""
    import ditron.runtime.world as world

    rt = types.SimpleNamespace(cache={})
    monkeypatch.setattr(world, "current", lambda: rt)
    for _ in range(2):
        with pytest.raises(ValueError, match="capacity must be >= 1, got 0"):
            bounded_cache.named("made", 0)
    assert bounded_cache.named("made").capacity == bounded_cache.DEFAULT_CAPACITY
    assert bounded_cache.named("made", 3).capacity == 3
