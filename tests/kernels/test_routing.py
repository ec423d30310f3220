"""The MoE routing kernels against plain-Python references on fresh random routings.

Outputs come from ``torch.empty`` filled with the integer maximum (``poisoned``, in
``conftest.py``), so an entry a kernel never writes fails the comparison.
"""

from __future__ import annotations

import pytest
import torch

from ditron.kernels.routing import group_received, returned_index, returned_sources, sort_copies

pytestmark = pytest.mark.usefixtures("poisoned")


def _ids(T: int, k: int, E: int, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, E, (T, k), generator=g)
    odd = torch.rand(T, k, generator=g)
    ids[odd < 0.08] = -1
    ids[odd > 0.95] = E + 3  # out of range: unrouted, like -1
    return ids


def _sorted_ref(ids: torch.Tensor, E: int, W: int):
    flat = ids.reshape(-1).tolist()
    key = [e if 0 <= e < E else E for e in flat]
    order = sorted(range(len(flat)), key=lambda c: (key[c], c))
    counts = [key.count(e) for e in range(E)]
    splits = [sum(counts[q * (E // W):(q + 1) * (E // W)]) for q in range(W)]
    return order, counts, splits


# (T, k, E, W): decode-sized, one block; 19 blocks summed by the placement (no scan); 44
# blocks scanned by 4 programs of 32 bins; k = 1; many experts (blocks of 32 copies, 150 of
# them: 16 scanning programs, each in two steps of 128 blocks); no tokens
CASES = [(16, 8, 64, 1), (37, 3, 6, 3), (300, 8, 64, 4), (700, 8, 64, 2), (50, 1, 4, 4),
         (600, 8, 256, 4), (0, 2, 8, 2)]


@pytest.mark.parametrize("T,k,E,W", CASES)
def test_sort_copies_matches_a_stable_sort(T, k, E, W, device):
    for call in range(2):  # fresh routing each call: nothing carried over
        ids = _ids(T, k, E, seed=hash((T, k, E, W, call)) % 2**31)
        order, counts, splits = _sorted_ref(ids, E, W)
        got = sort_copies(ids.to(device, torch.int32 if call else torch.int64), E, W)
        assert got.order.cpu().tolist() == order
        assert got.token.cpu().tolist() == [c // k for c in order]
        assert got.counts.cpu().tolist() == counts
        assert got.send_splits.cpu().tolist() == splits



def test_sort_copies_refuses_more_copies_than_int32_positions():
    ids = torch.zeros(1, 1, dtype=torch.int32).expand(2**30, 2)  # no memory behind it
    with pytest.raises(ValueError, match="2147483648 copies; at most 2\\*\\*31 - 1"):
        sort_copies(ids, 8, 1)

def _grouped_ref(cnt: torch.Tensor, cap: int):
    """Received rows (by source, each source's by expert) regrouped by expert, stably."""
    W, L = cnt.shape
    blocks = [(s, e) for s in range(W) for e in range(L) for _ in range(int(cnt[s, e]))]
    kept = blocks[:cap]
    perm = sorted(range(len(kept)), key=lambda r: (kept[r][1], r)) + list(range(len(kept), cap))
    inv = [0] * cap
    for i, r in enumerate(perm):
        inv[r] = i
    tokens = [sum(1 for b in kept if b[1] == e) for e in range(L)]
    offsets = [sum(tokens[:e]) for e in range(L + 1)]
    splits = [sum(1 for b in kept if b[0] == s) for s in range(W)]
    return perm, inv, offsets, splits


@pytest.mark.parametrize("W,L,cap", [(1, 64, 300), (3, 5, 40), (2, 3, 7), (4, 2, 0),
                                     (4, 16, 10_000), (3, 7, 1)])
def test_group_received_matches_a_stable_regrouping(W, L, cap, device):
    g = torch.Generator().manual_seed(W * 1000 + L * 10 + cap)
    for call in range(2):
        cnt = torch.randint(0, 9, (W, L), generator=g)
        cnt[torch.rand(W, L, generator=g) < 0.2] = 0
        got = group_received(cnt.to(device), cap)
        for name, a, b in zip(("perm", "inv_perm", "offsets", "kept"), got,
                              _grouped_ref(cnt, cap), strict=True):
            assert a.cpu().tolist() == b, f"call {call}: {name}"


@pytest.mark.parametrize("T,k,E,W", [(40, 4, 8, 1), (23, 3, 6, 3), (300, 8, 64, 4)])
def test_returned_index_finds_each_copy(T, k, E, W, device):
    g = torch.Generator().manual_seed(T + W)
    ids = _ids(T, k, E, seed=T * W)
    order, counts, splits = _sorted_ref(ids, E, W)
    # each destination sends back a random prefix of what it got (the rest was dropped)
    back = [int(torch.randint(0, s + 1, (1,), generator=g)) for s in splits]
    want = [-1] * (T * k)
    p = 0
    for q in range(W):
        for j in range(splits[q]):
            if j < back[q]:
                want[order[p]] = sum(back[:q]) + j
            p += 1
    got = returned_index(torch.tensor(order, device=device), torch.tensor(splits, device=device),
                         torch.tensor(back, device=device))
    assert got.cpu().tolist() == want


@pytest.mark.parametrize("T,k,E,W,rank", [(40, 4, 8, 1, 0), (23, 3, 6, 3, 1), (300, 8, 64, 4, 3)])
def test_returned_sources_split_own_copies_from_peers(T, k, E, W, rank, device):
    g = torch.Generator().manual_seed(T + W + 1)
    ids = _ids(T, k, E, seed=T * W + 1)
    order, counts, splits = _sorted_ref(ids, E, W)
    back = [int(torch.randint(0, s + 1, (1,), generator=g)) for s in splits]
    back[rank] = splits[rank]  # what a rank keeps of its own copies comes back whole
    first = int(torch.randint(0, 50, (1,), generator=g))
    kept = torch.randint(0, 30, (W,), generator=g)  # what the combine sends each rank
    kept[rank] = back[rank]
    send_index = torch.randperm(int(kept.sum()) + 5, generator=g)
    want_idx, want_own = [-1] * (T * k), [-1] * (T * k)
    p = 0
    for q in range(W):
        for j in range(splits[q]):
            if q == rank:
                want_own[order[p]] = int(send_index[int(kept[:rank].sum()) + j])
            elif j < back[q]:
                want_idx[order[p]] = first + sum(back[:q]) + j
            p += 1
    idx, own = returned_sources(
        torch.tensor(order, device=device), torch.tensor(splits, device=device),
        torch.tensor(back, device=device), torch.tensor([first], device=device),
        kept.to(device), send_index.to(device), rank)
    assert idx.cpu().tolist() == want_idx
    assert own.cpu().tolist() == want_own


def test_sort_copies_refuses_what_it_cannot_split():
    """Experts are split among ranks in equal blocks: with ``num_experts`` not a multiple of
    the world size, copies of the last experts went to no rank's split (the splits summed
    to fewer copies than were routed) and fewer experts than ranks divided by zero."""
    ids = torch.tensor([[0, 5], [3, 1], [2, 2]])
    for E, W in ((6, 4), (2, 4)):
        with pytest.raises(ValueError, match=f"num_experts \\({E}\\) must be a multiple of "
                                             f"the world size \\({W}\\)"):
            sort_copies(ids, E, W)
    with pytest.raises(ValueError, match="world_size must be a positive int, got 0"):
        sort_copies(ids, 6, 0)
    for bad in (ids.float(), ids.reshape(-1)):
        with pytest.raises(ValueError, match="topk_ids must be a 2-D integer tensor"):
            sort_copies(bad, 6, 2)
    assert sort_copies(ids, 6, 3).send_splits.tolist() == [2, 3, 1]
