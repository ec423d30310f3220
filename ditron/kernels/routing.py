"""MoE routing tables on the device: the index arithmetic of a dispatch and a combine.

Each function here replaces a chain of small torch ops (sorts, counts, running sums,
searches: ~35 kernel launches per dispatch) with one to three Triton launches, so an eager
decoding step is not bound by the host issuing them. Nothing is read on the host.

* :func:`sort_copies`: the copies ``c = t * k + j`` of a rank's tokens sorted by expert
  (stable), with the counts per expert and per destination rank;
* :func:`group_received`: where each received row goes when the rows that came (by
  source rank, each source's rows by expert) are regrouped by local expert;
* :func:`returned_index`: for every copy, the row of the combine's received rows that
  holds its expert output, or ``-1``; :func:`returned_sources` the same for rows read
  where they lie (a peer's in the all-to-all's inbox, this rank's own in ``y``).
"""

from __future__ import annotations

import dataclasses

import torch
import triton
import triton.language as tl

from ..runtime.grid_math import cdiv, next_power_of_2
from ..runtime.integers import check_int
from ..runtime.triton_launch import FastKernel


@triton.jit
def _expert_keys(ids, c, n, E):
    """The sort key of copies ``c``: the expert id, ``E`` for an unrouted copy (an id
    outside ``[0, E)``), ``-1`` past the ``n`` copies (no bin)."""
    e = tl.load(ids + c, mask=c < n, other=-1).to(tl.int64)
    key = tl.where((e >= 0) & (e < E), e, E)
    return tl.where(c < n, key, -1)


@triton.jit
def _count_kernel(ids, hist, n, E, BLOCK: tl.constexpr, EB: tl.constexpr):
    """``hist[b, e]`` (int32): the copies of block ``b`` with key ``e``."""
    b = tl.program_id(0)
    c = b * BLOCK + tl.arange(0, BLOCK)
    key = _expert_keys(ids, c, n, E)
    bins = tl.arange(0, EB)
    hits = (key[:, None] == bins[None, :]).to(tl.int32)
    tl.store(hist + b * EB + bins, tl.sum(hits, axis=0))


@triton.jit
def _scan_kernel(hist, total, nb, CH: tl.constexpr, EB: tl.constexpr, BB: tl.constexpr):
    """In place: ``hist[b, e]`` becomes the copies of blocks ``< b`` with key ``e``;
    ``total[e]`` (int64): all copies with key ``e``. Program ``p`` scans bins ``[p * BB,
    (p + 1) * BB)``."""
    bins = tl.program_id(0) * BB + tl.arange(0, BB)
    carry = tl.zeros((BB,), dtype=tl.int32)
    for b0 in range(0, nb, CH):
        bs = b0 + tl.arange(0, CH)
        ptrs = hist + bs[:, None] * EB + bins[None, :]
        h = tl.load(ptrs, mask=(bs < nb)[:, None], other=0)
        tl.store(ptrs, tl.cumsum(h, axis=0) - h + carry[None, :], mask=(bs < nb)[:, None])
        carry += tl.sum(h, axis=0)
    tl.store(total + bins, carry.to(tl.int64))


@triton.jit
def _place_kernel(ids, hist, total, order, token, counts, send_splits, n, nb, E, k, local, W,
                  BLOCK: tl.constexpr, EB: tl.constexpr, WB: tl.constexpr,
                  NB: tl.constexpr):
    """``order[pos(c)] = c`` and ``token[pos(c)] = c // k``, ``pos(c)``: the copies before
    ``c`` in (key, c) order, computed in int32 (fewer than 2**31 copies). ``NB > 0``:
    ``hist`` holds the ``nb <= NB`` blocks' own counts (no scan ran), summed here."""
    b = tl.program_id(0)
    c = b * BLOCK + tl.arange(0, BLOCK)
    key = _expert_keys(ids, c, n, E)
    bins = tl.arange(0, EB)
    if NB > 0:  # a row at a time: an [NB, EB] tile beside the [BLOCK, EB] one spilled
        tot = tl.zeros((EB,), dtype=tl.int64)
        prior = tl.zeros((EB,), dtype=tl.int32)
        for j in tl.static_range(NB):  # unrolled: the loads issue together
            h = tl.load(hist + j * EB + bins, mask=j < nb, other=0)
            tot += h
            prior += tl.where(j < b, h, 0)
    else:
        tot = tl.load(total + bins)
        prior = tl.load(hist + b * EB + bins)
    base = (tl.cumsum(tot, axis=0) - tot + prior).to(tl.int32)
    hits = key[:, None] == bins[None, :]
    before = tl.cumsum(hits.to(tl.int32), axis=0) - 1  # same-key copies earlier in the block
    pos = tl.sum(tl.where(hits, base[None, :] + before, 0), axis=1)
    tl.store(order + pos, c.to(tl.int64), mask=c < n)
    tl.store(token + pos, (c // k).to(tl.int64), mask=c < n)
    if b == 0:
        tl.store(counts + bins, tot, mask=bins < E)
        ranks = tl.arange(0, WB)
        mine = (bins[None, :] // local == ranks[:, None]) & (bins[None, :] < E)
        tl.store(send_splits + ranks, tl.sum(tl.where(mine, tot[None, :], 0), axis=1),
                 mask=ranks < W)


_COUNT = FastKernel(_count_kernel)
_SCAN = FastKernel(_scan_kernel)
_PLACE = FastKernel(_place_kernel)


@dataclasses.dataclass(frozen=True)
class SortedCopies:
    """A rank's copies sorted by expert (int64 device tensors).

    Send position ``i`` holds copy ``order[i]`` (``c = t * k + j``) of token
    ``token[i] = order[i] // k``, sorted by expert id, one expert's copies in token order,
    unrouted copies last; ``counts [E]``: copies per expert; ``send_splits [W]``: copies
    per destination rank (experts in equal blocks).
    """

    order: torch.Tensor
    token: torch.Tensor
    counts: torch.Tensor
    send_splits: torch.Tensor


#: block histograms (blocks x bins) small enough for each placing program to sum itself,
#: sparing the scan's launch (decoding sizes: up to 4096 copies with 64 experts)
FOLD_BINS = 4096
#: bins per program of the scan (programs scan their bins' running sums side by side)
SCAN_BINS = 32


def sort_copies(topk_ids: torch.Tensor, num_experts: int, world_size: int) -> SortedCopies:
    """Sort the copies of ``topk_ids [T, k]`` (integers; an id outside ``[0, E)`` marks an
    unrouted copy) by expert, ``E = num_experts`` a multiple of ``world_size``. Three
    launches: block histograms, their running sums (by bins, side by side), the placement;
    two when the histograms are small (:data:`FOLD_BINS`), the placement summing them.
    Raises ``ValueError`` for other ids than a 2-D integer tensor or ``num_experts`` not a
    multiple of ``world_size`` (its experts would land on no rank's split)."""
    world_size = check_int(world_size, "sort_copies: world_size", 1)
    num_experts = check_int(num_experts, "sort_copies: num_experts", 1)
    if num_experts % world_size:
        raise ValueError(f"sort_copies: num_experts ({num_experts}) must be a multiple of the "
                         f"world size ({world_size}): experts go to ranks in equal blocks")
    if topk_ids.dim() != 2 or topk_ids.dtype.is_floating_point or topk_ids.is_complex() \
            or topk_ids.dtype == torch.bool:
        raise ValueError(f"sort_copies: topk_ids must be a 2-D integer tensor [T, k], got "
                         f"{tuple(topk_ids.shape)} {topk_ids.dtype}")
    n = topk_ids.numel()
    if n >= 2**31:  # positions are int32 inside the placement
        raise ValueError(f"sort_copies: {n} copies; at most 2**31 - 1 are supported")
    ids = topk_ids.contiguous()
    dev = ids.device
    order = torch.empty(n, dtype=torch.int64, device=dev)
    token = torch.empty(n, dtype=torch.int64, device=dev)
    counts = torch.empty(num_experts, dtype=torch.int64, device=dev)
    send_splits = torch.empty(world_size, dtype=torch.int64, device=dev)
    if n == 0:
        counts.zero_()
        send_splits.zero_()
        return SortedCopies(order, token, counts, send_splits)
    eb = next_power_of_2(num_experts + 1)
    block = max(16, min(128, 16384 // eb))
    nb = cdiv(n, block)
    hist = torch.empty((nb, eb), dtype=torch.int32, device=dev)
    total = torch.empty(eb, dtype=torch.int64, device=dev)
    _COUNT[(nb,)](ids, hist, n, num_experts, BLOCK=block, EB=eb, num_warps=4)
    fold = next_power_of_2(nb) if nb * eb <= FOLD_BINS else 0
    if not fold:
        bb = min(eb, SCAN_BINS)
        _SCAN[(eb // bb,)](hist, total, nb, CH=min(next_power_of_2(nb), 4096 // bb), EB=eb,
                           BB=bb, num_warps=4)
    _PLACE[(nb,)](ids, hist, total, order, token, counts, send_splits, n, nb, num_experts,
                  topk_ids.shape[1], num_experts // world_size, world_size, BLOCK=block,
                  EB=eb, WB=next_power_of_2(world_size), NB=fold, num_warps=4)
    return SortedCopies(order, token, counts, send_splits)


@triton.jit
def _group_kernel(cnt, perm, inv_perm, offsets, kept_splits, W, L, cap,
                  BLOCK: tl.constexpr, WB: tl.constexpr, LB: tl.constexpr):
    """Every program rebuilds the ``[W, L]`` tables (small) and maps its block of rows."""
    s = tl.arange(0, WB)
    e = tl.arange(0, LB)
    ok = (s[:, None] < W) & (e[None, :] < L)
    c = tl.load(cnt + s[:, None] * L + e[None, :], mask=ok, other=0)
    rows = tl.sum(c, axis=1)
    start = (tl.cumsum(rows, axis=0) - rows)[:, None] + tl.cumsum(c, axis=1) - c
    end = start + c
    kept = tl.maximum(tl.minimum(end, cap) - start, 0)
    per_expert = tl.sum(kept, axis=0)
    first = tl.cumsum(per_expert, axis=0) - per_expert
    # block (s, e)'s received row start + j goes to first[e] + kept(s' < s, e) + j
    shift = first[None, :] + tl.cumsum(kept, axis=0) - kept - start
    if tl.program_id(0) == 0:
        tl.store(offsets + e, first, mask=e < L)
        tl.store(offsets + L, tl.sum(per_expert, axis=0))
        tl.store(kept_splits + s, tl.sum(kept, axis=1), mask=s < W)
    r = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    start_f = tl.reshape(start, (WB * LB,))
    end_f = tl.reshape(end, (WB * LB,))
    shift_f = tl.reshape(shift, (WB * LB,))
    inside = (start_f[None, :] <= r[:, None]) & (r[:, None] < end_f[None, :])
    g = r + tl.sum(tl.where(inside, shift_f[None, :], 0), axis=1)  # rows past all: g = r
    tl.store(inv_perm + r, g, mask=r < cap)
    tl.store(perm + g, r.to(tl.int64), mask=r < cap)


_GROUP = FastKernel(_group_kernel)


def group_received(recv_counts: torch.Tensor, capacity: int
                   ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Regroup received rows by local expert: ``(perm, inv_perm, offsets, kept)``.

    ``recv_counts [W, L]`` (int64): the rows source rank ``s`` sends for local expert ``e``;
    they arrive by source, each source's by expert, and rows from ``capacity`` on are
    dropped. Grouped by expert (stable: source, then arrival), grouped row ``i`` is received
    row ``perm[i]`` and received row ``r`` is grouped row ``inv_perm[r]`` (both
    ``[capacity]``; rows past the kept ones keep their place); ``offsets [L + 1]``: expert
    ``e``'s grouped rows start at ``offsets[e]`` (``offsets[L]``: all kept rows);
    ``kept [W]``: rows kept from each source. One launch.
    """
    W, L = recv_counts.shape
    dev = recv_counts.device
    perm = torch.empty(capacity, dtype=torch.int64, device=dev)
    inv_perm = torch.empty(capacity, dtype=torch.int64, device=dev)
    offsets = torch.empty(L + 1, dtype=torch.int64, device=dev)
    kept = torch.empty(W, dtype=torch.int64, device=dev)
    wb, lb = next_power_of_2(W), next_power_of_2(L)
    block = max(16, min(128, 8192 // (wb * lb)))
    _GROUP[(max(1, cdiv(capacity, block)),)](
        recv_counts.to(torch.int64).contiguous(), perm, inv_perm, offsets, kept, W, L,
        capacity, BLOCK=block, WB=wb, LB=lb, num_warps=4)
    return perm, inv_perm, offsets, kept


@triton.jit
def _returned_kernel(order, send_splits, back_splits, idx, n, W, first, kept, send_index,
                     own_idx, me, BLOCK: tl.constexpr, WB: tl.constexpr, SPLIT: tl.constexpr):
    p = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    q = tl.arange(0, WB)
    sent = tl.load(send_splits + q, mask=q < W, other=0)
    back = tl.load(back_splits + q, mask=q < W, other=0)
    j = p[:, None] - (tl.cumsum(sent, axis=0) - sent)[None, :]  # p's place in q's rows
    came = (j >= 0) & (j < back[None, :])  # back[q] <= sent[q]: at most one q per p
    row = tl.sum(tl.where(came, (tl.cumsum(back, axis=0) - back)[None, :] + j, 0), axis=1)
    found = tl.sum(came.to(tl.int32), axis=1) > 0
    c = tl.load(order + p, mask=p < n, other=0)
    if SPLIT:  # my own copies: the row of x that the combine's send_index sends myself
        own = found & (tl.sum(tl.where(came, q[None, :], 0), axis=1) == me)
        mine = tl.sum(tl.where(came, j, 0), axis=1)  # its place among my own rows
        own_src = tl.sum(tl.where(q < me, tl.load(kept + q, mask=q < W, other=0), 0))
        src = tl.load(send_index + own_src + mine, mask=own & (p < n), other=-1)
        tl.store(own_idx + c, tl.where(own, src, -1), mask=p < n)
        tl.store(idx + c, tl.where(found & ~own, tl.load(first) + row, -1), mask=p < n)
    else:
        tl.store(idx + c, tl.where(found, row, -1), mask=p < n)


_RETURNED = FastKernel(_returned_kernel)


def returned_index(order: torch.Tensor, send_splits: torch.Tensor,
                   back_splits: torch.Tensor) -> torch.Tensor:
    """For copy ``c``, the row of the combine's received rows holding its output: ``idx
    [T * k]`` (int64, ``-1``: dropped or unrouted).

    ``order``, ``send_splits``: from :func:`sort_copies` (send position ``p`` went to rank
    ``q`` as its ``j``-th row); ``back_splits [W]``: rows that came back from each rank,
    concatenated in rank order (rank ``q``'s first ``back_splits[q]`` of the ``j``-th).
    One launch.
    """
    idx = torch.empty(order.numel(), dtype=torch.int64, device=order.device)
    _returned(order, send_splits, back_splits, idx)
    return idx


def returned_sources(order: torch.Tensor, send_splits: torch.Tensor,
                     back_splits: torch.Tensor, first: torch.Tensor, kept_splits: torch.Tensor,
                     send_index: torch.Tensor, rank: int) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`returned_index` for rows read where they lie: ``(idx, own)``, both ``[T *
    k]`` int64. A copy that came back from a peer is at row ``idx[c]`` of an inbox whose
    received rows start at row ``first[0]`` (``idx`` includes ``first[0]``; ``-1``
    otherwise); one this rank's experts made is row ``own[c]`` of the combine's ``y``
    (``-1`` otherwise): the combine sent itself rows ``y[send_index[i]]`` for ``i`` from
    ``sum(kept_splits[:rank])`` on. One launch."""
    n = order.numel()
    idx = torch.empty(n, dtype=torch.int64, device=order.device)
    own = torch.empty_like(idx)
    _returned(order, send_splits, back_splits, idx, (first, kept_splits, send_index, own, rank))
    return idx, own


def _returned(order: torch.Tensor, send_splits: torch.Tensor, back_splits: torch.Tensor,
              idx: torch.Tensor, split: tuple | None = None) -> None:
    n = order.numel()
    W = send_splits.numel()
    if not n:
        return
    first, kept, send_index, own, me = split or (idx, idx, idx, idx, -1)
    _RETURNED[(cdiv(n, 128),)](order, send_splits, back_splits.to(torch.int64), idx, n, W,
                               first, kept.to(torch.int64), send_index, own, me, BLOCK=128,
                               WB=next_power_of_2(W), SPLIT=split is not None, num_warps=4)
