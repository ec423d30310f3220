"""Expert parallelism on edge routings, against a reference computed in one process from
every rank's inputs: each routed copy goes to its expert's owner (receivers keep sources
0, 1, ... in order, each source's copies by expert id, stably, up to the capacity), the
expert is applied, and the results are weighted and summed back.

Edges: a rank sending nothing, every copy to one expert (past the capacity too), k = 1 and
k larger than the experts per rank (duplicate experts in a token's top-k), ids outside
``[0, E)`` other than ``-1`` (and, outside debug mode, ``>= E``), int16 / int32 ids,
non-contiguous tokens, ids and weights, fp16 / bf16 / fp32, no tokens anywhere, a capacity
of 0 and 1, many experts; all in one launch per world size, so the routing tables and
signals are reused across changing routings; and dispatches combined out of order.
"""

from __future__ import annotations

import pytest
import torch

import ditron
from ditron.runtime.world import current

from .poison import poison_empty


def _kept(ids_by_rank: list[torch.Tensor], E: int, W: int, cap: int) -> list[torch.Tensor]:
    """Per rank, a bool like its ids: the copy is routed and kept at its destination."""
    local = E // W
    kept = [torch.zeros(i.shape, dtype=torch.bool) for i in ids_by_rank]
    for q in range(W):
        taken = 0
        for s, ids in enumerate(ids_by_rank):
            flat = ids.reshape(-1).long()
            key = torch.where((flat < 0) | (flat >= E), E, flat)
            for c in torch.argsort(key, stable=True).tolist():
                e = int(flat[c])
                if 0 <= e < E and e // local == q:
                    kept[s].view(-1)[c] = taken < cap
                    taken += 1
    return kept


def _reference(x, ids, weights, kept, w1, w2) -> torch.Tensor:
    """float64 ``sum_j weights[t, j] * relu(x[t] @ w1[e]) @ w2[e]`` over kept copies."""
    out = torch.zeros(x.shape[0], w2.shape[2], dtype=torch.float64)
    for t in range(x.shape[0]):
        for j in range(ids.shape[1]):
            e = int(ids[t, j])
            if kept[t, j]:
                y = torch.relu(x[t].double() @ w1[e].double()) @ w2[e].double()
                out[t] += (1.0 if weights is None else float(weights[t, j])) * y
    return out


def _inputs(case: str, g: torch.Generator, W: int, E: int, k: int):
    """Every rank's ``(x, ids, weights)`` for a case (drawn alike on every rank)."""
    tokens = [0] * W if case == "no tokens" else [5 + 2 * r for r in range(W)]
    xs = [torch.randn(t, 16, generator=g) for t in tokens]
    ids = [torch.randint(0, E, (t, k), generator=g) for t in tokens]
    wts = [torch.rand(t, k, generator=g) for t in tokens]
    if case == "one expert":
        ids = [torch.full_like(i, E - 1) for i in ids]
    for r, i in enumerate(ids):
        if case == "odd ids" and i.shape[0] > 2:
            i[0, 0], i[1, :], i[2, -1] = -7, -1, -(2**40)
        if case == "ids >= E" and i.shape[0] > 2:
            i[0, 0], i[2, -1] = E, E + 100
        if case == "rank 0 sends nothing" and r == 0:
            i.fill_(-1)
    return xs, ids, wts


# (case, experts per rank, k, dtype, ids dtype, capacity, non-contiguous, no weights)
CASES = [
    ("plain", 2, 2, torch.float32, torch.int64, None, False, False),
    ("plain", 2, 2, torch.float16, torch.int32, None, True, False),
    ("plain", 2, 3, torch.bfloat16, torch.int16, 3, False, True),
    ("plain", 3, 1, torch.float32, torch.int32, None, True, False),
    ("plain", 1, 4, torch.float32, torch.int64, None, False, False),  # k > experts per rank
    ("one expert", 2, 3, torch.float32, torch.int64, None, False, False),
    ("one expert", 2, 2, torch.float32, torch.int32, 1, False, False),
    ("odd ids", 2, 3, torch.float32, torch.int64, None, True, False),
    ("rank 0 sends nothing", 2, 2, torch.float32, torch.int64, 4, False, False),
    ("no tokens", 2, 2, torch.float32, torch.int64, None, False, False),
    ("plain", 2, 2, torch.float32, torch.int64, 0, False, False),
    ("plain", 40, 4, torch.float32, torch.int32, None, False, False),  # many experts
]


def check_edges(cases: list) -> int:
    rt = current()
    W, me, dev = rt.world.world_size, rt.world.rank, rt.world.device
    poison_empty()
    checks = 0
    for n, (case, per_rank, k, dtype, id_dtype, cap, strided, no_weights) in enumerate(cases):
        E = per_rank * W
        g = torch.Generator().manual_seed(1000 + n)
        xs, ids, wts = _inputs(case, g, W, E, k)
        xs = [x.to(dtype) for x in xs]
        w1 = (torch.randn(E, 16, 12, generator=g) / 4).to(dtype)
        w2 = (torch.randn(E, 12, 16, generator=g) / 12 ** 0.5).to(dtype)
        x, i, wt = xs[me].to(dev), ids[me].to(id_dtype).to(dev), wts[me].to(dev)
        if strided:  # column-major views
            x, i, wt = (t.t().contiguous().t() for t in (x, i, wt))
        mt = max(t.shape[0] for t in xs)
        d = ditron.ops.moe_dispatch(x, i, E, max_tokens=mt, max_recv_rows=cap)
        mine = slice(me * per_rank, (me + 1) * per_rank)
        h = ditron.ops.grouped_gemm(d.x, w1[mine].to(dev), d.expert_offsets)
        y = ditron.ops.grouped_gemm(torch.relu(h), w2[mine].to(dev), d.expert_offsets)
        out = ditron.ops.moe_combine(y, d, None if no_weights else wt)
        kept = _kept(ids, E, W, W * mt * k if cap is None else cap)
        want = _reference(xs[me], ids[me], None if no_weights else wts[me], kept[me], w1, w2)
        tol = 1e-4 if dtype == torch.float32 else 3e-2
        assert out.dtype == dtype and out.shape == want.shape
        torch.testing.assert_close(out.cpu().double(), want, rtol=tol, atol=tol,
                                   msg=f"rank {me}: {case} (case {n})")
        counts = d.tokens_per_expert.cpu()
        assert counts.tolist() == [sum(int(((ids[s] == me * per_rank + e) & kept[s]).sum())
                                       for s in range(W)) for e in range(per_rank)]
        checks += 1
    return checks


@pytest.mark.parametrize("world_size", [1, 2, 3, 4])
def test_edge_routings_match_torch(world_size, backend):
    cases = CASES if world_size == 1 else CASES[world_size % 2::2]  # and on W > 1
    assert ditron.launch(check_edges, world_size, cases, backend=backend) == \
        [len(cases)] * world_size


def test_ids_past_the_experts_are_unrouted_outside_debug_mode(monkeypatch, backend):
    """Outside debug mode (no wait timeout) ids ``>= E`` are not read on the host: they
    count zero, as ``-1`` does."""
    monkeypatch.setenv("DITRON_WAIT_TIMEOUT", "0")
    cases = [("ids >= E", 2, 2, torch.float32, torch.int64, None, False, False),
             ("ids >= E", 2, 3, torch.float32, torch.int32, 4, False, False)]
    assert ditron.launch(check_edges, 2, cases, backend=backend) == [2, 2]


def check_out_of_order() -> int:
    """Three dispatches of different sizes, then their combines in reverse order: each
    dispatch's rows and routing stay its own (no workspace shared between calls)."""
    W, me, dev = ditron.world().world_size, ditron.world().rank, ditron.world().device
    poison_empty()
    E, k = 2 * W, 2
    calls = []
    for n in range(3):
        g = torch.Generator().manual_seed(50 + n)
        xs, ids, wts = _inputs("plain", g, W, E, k)
        xs = [x[: x.shape[0] - n] for x in xs]
        ids = [i[: i.shape[0] - n] for i in ids]
        wts = [w[: w.shape[0] - n] for w in wts]
        mt = max(x.shape[0] for x in xs)
        d = ditron.ops.moe_dispatch(xs[me].to(dev), ids[me].to(dev), E, max_tokens=mt)
        calls.append((d, xs[me], wts[me]))
    for d, x, wts in reversed(calls):
        out = ditron.ops.moe_combine(d.x * 2, d, wts.to(dev))  # experts: times 2
        torch.testing.assert_close(out.cpu(), 2 * x * wts.sum(1, keepdim=True))
    return len(calls)


def test_dispatches_combined_out_of_order(backend):
    assert ditron.launch(check_out_of_order, 3, backend=backend) == [3] * 3
