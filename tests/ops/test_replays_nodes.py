"""The device all-to-alls across (simulated) nodes (``ops/a2a_nodes.py``) on edge cases, and
the replay cache's policy (``ops/replays.py``: eager, capture, replay; dropped keys)."""

from __future__ import annotations

import pytest
import torch

import ditron
from ditron.runtime.world import current


@pytest.fixture(autouse=True)
def _poison(monkeypatch):
    monkeypatch.setenv("DITRON_POISON", "1")  # fresh workspaces read as NaN


def _inputs(rank: int, call: int, w: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Rank ``rank``'s ``(x, extra, splits)`` of call ``call``, computable on every rank:
    fp8 rows of 5 bytes, int16 companion rows of 3, splits of -1..3 (negative ones send
    nothing, those past the rows are cut), some ranks without rows."""
    g = torch.Generator().manual_seed(100 * call + rank)
    n = int(torch.randint(0, 6, (1,), generator=g))
    x = (torch.randn(n, 5, generator=g) * 4).to(torch.float8_e4m3fn)
    extra = torch.randint(-999, 999, (n, 3), generator=g, dtype=torch.int16)
    splits = torch.randint(-1, 4, (w,), generator=g)
    return x, extra, splits


def _sent(t: torch.Tensor, splits: torch.Tensor, to: int) -> torch.Tensor:
    """The rows of ``t`` that ``splits`` sends to rank ``to`` (cut at ``t``'s rows)."""
    start = sum(max(s, 0) for s in splits.tolist()[:to])
    return t[start: start + max(int(splits[to]), 0)]


def check_pair_small_capacity() -> int:
    """``all_to_all_device_pair`` with 0, 1, 2 and 7 rows of capacity, a row of 5 bytes
    and a companion of 2-byte elements: across nodes the companion's columns of the packed
    rows start at byte 5. With one row or none such a column slice counts as contiguous
    and was viewed as int16 in place, which torch refused (an odd storage offset). Then
    complex conjugate views as rows and as companions."""
    w, me, dev = ditron.world().world_size, ditron.world().rank, ditron.world().device
    assert current().topo.num_nodes > 1
    checks = 0
    for call, cap in enumerate((0, 1, 2, 7)):
        every = [_inputs(r, call, w) for r in range(w)]
        x, extra, splits = every[me]
        want_x = torch.cat([_sent(xr, sr, me) for xr, _, sr in every])
        want_e = torch.cat([_sent(er, sr, me) for _, er, sr in every])
        counts = [_sent(xr, sr, me).shape[0] for xr, _, sr in every]
        out, extra_out, out_splits = ditron.ops.all_to_all_device_pair(
            x.to(dev), extra.to(dev), splits.to(dev), cap, zero_missing=True)
        kept = min(cap, want_x.shape[0])
        assert out.shape == (cap, 5) and extra_out.shape == (cap, 3)
        assert out_splits.tolist() == counts
        assert torch.equal(out[:kept].cpu().view(torch.uint8), want_x[:kept].view(torch.uint8))
        assert torch.equal(extra_out[:kept].cpu(), want_e[:kept])
        assert not extra_out[kept:].any() and not out[kept:].view(torch.uint8).any()
        checks += 1
    # conjugate views (x.conj()) travel by value; their bytes were refused (Tensor.view)
    z = torch.randn(w, 2, dtype=torch.complex64, generator=torch.Generator().manual_seed(me))
    ones = torch.ones(w, dtype=torch.int64, device=dev)
    out, extra_out, _ = ditron.ops.all_to_all_device_pair(z.to(dev).conj(), z.to(dev).conj(),
                                                          ones, w)
    want = torch.stack([torch.randn(w, 2, dtype=torch.complex64,
                                    generator=torch.Generator().manual_seed(r))[me]
                        for r in range(w)]).conj()
    assert torch.equal(out.cpu(), want) and torch.equal(extra_out.cpu(), want)
    return checks + 1


@pytest.mark.parametrize("world_size", [3, 4])
def test_pair_across_nodes_with_small_capacity(world_size, monkeypatch, backend):
    monkeypatch.setenv("DITRON_LOCAL_WORLD_SIZE", "2")  # ranks {0, 1}, {2, 3}
    assert ditron.launch(check_pair_small_capacity, world_size, backend=backend) == \
        [5] * world_size


def test_replay_cache_policy():
    """First call on a key eager, the second captures, later ones replay; a key whose
    graph was dropped for room runs eager from then on."""
    from ditron.ops.replays import _Cache

    cache = _Cache(max_graphs=2)
    assert [cache.step("a"), cache.step("a")] == ["eager", "capture"]
    cache.add("a", "graph a")
    assert cache.step("a") == "replay"
    for key in ("b", "c"):
        assert [cache.step(key), cache.step(key)] == ["eager", "capture"]
        cache.add(key, f"graph {key}")
    assert list(cache.graphs) == ["b", "c"]  # "a", least recently used, was dropped
    assert [cache.step("a"), cache.step("a"), cache.step("b")] == ["eager", "eager", "replay"]


def check_pair_disagreement() -> int:
    """Ranks whose rows (or companions) differ in dtype and row shape but not in bytes per
    row: across nodes every rank raises, naming the fields, as on one node. Before, the
    agreement compared only the packed rows of bytes, and each rank read the others'
    bytes as its own dtype."""
    w, me, dev = ditron.world().world_size, ditron.world().rank, ditron.world().device
    ones = torch.ones(w, dtype=torch.int64, device=dev)
    x = torch.ones(w, 4, dtype=torch.float16, device=dev)
    e = torch.ones(w, 1, device=dev)
    odd_x = torch.ones(w, 2, device=dev) if me == w - 1 else x
    with pytest.raises(ValueError, match=r"disagree on the call \(row_shape, dtype differ\)"):
        ditron.ops.all_to_all_device_pair(odd_x, e, ones, w)
    odd_e = e.int() if me == 0 else e
    with pytest.raises(ValueError, match=r"disagree on the call \(extra differs\)"):
        ditron.ops.all_to_all_device_pair(x, odd_e, ones, w)
    out, extra_out, _ = ditron.ops.all_to_all_device_pair(x, e, ones, w)  # still in step
    assert torch.equal(out, x) and torch.equal(extra_out, e)
    return 3


def test_pair_across_nodes_refuses_different_dtypes(monkeypatch, backend):
    monkeypatch.setenv("DITRON_LOCAL_WORLD_SIZE", "2")
    assert ditron.launch(check_pair_disagreement, 3, backend=backend) == [3] * 3
