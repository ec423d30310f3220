"""Expert parallelism (moe_dispatch, grouped_gemm, moe_combine) against torch references.

The reference of a layer is computed on each rank from its own tokens and the whole set of
expert weights (made from one seed on every rank); the reference of the dispatch, of which
rows land where and which are dropped at a capacity, comes from the ranks' routings
gathered with torch.distributed.
"""

from __future__ import annotations

import pytest
import torch
import torch.distributed as dist

import ditron
from ditron.kernels.grouped_gemm import GroupedGemmConfig, grouped_gemm
from ditron.runtime.world import current

from .poison import poison_empty

TOL = {torch.float32: (1e-4, 1e-4), torch.bfloat16: (3e-2, 3e-2)}


def _gen(*key: int) -> torch.Generator:
    return torch.Generator().manual_seed(hash(key) % (2**31))


# -- grouped GEMM (local) -----------------------------------------------------------------
def _grouped_ref(x, w, offsets):
    out = torch.full((x.shape[0], w.shape[2]), float("nan"), dtype=torch.float64)
    for g in range(w.shape[0]):
        lo, hi = int(offsets[g]), int(offsets[g + 1])
        out[lo:hi] = x[lo:hi].double() @ w[g].double()
    return out


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_grouped_gemm_matches_torch(dtype, backend):
    """Groups of 0, 1, odd and > 2 tiles of rows, one group and 33 groups, a first offset
    > 0, rows past the last group left alone, K and N not multiples of the blocks, w
    transposed; repeated calls."""
    dev = "cuda" if backend == "cuda" else "cpu"
    g = _gen(1, int(dtype == torch.float32))
    cfg = GroupedGemmConfig(16, 16, 16, num_warps=4, num_stages=1)
    many = torch.randint(0, 20, (33,), generator=g).tolist()  # 33 groups: a 64-wide lookup
    for counts in ([3, 0, 37, 1, 16], [0, 0], [40], many):
        offsets = torch.tensor([0, *counts]).cumsum(0) + 2
        R, K, N = int(offsets[-1]) + 5, 35, 21
        x = torch.randn(R, K, generator=g).to(dtype)
        w = torch.randn(len(counts), N, K, generator=g).to(dtype).transpose(1, 2)
        out = torch.full((R, N), float("nan"), dtype=dtype, device=dev)
        grouped_gemm(x.to(dev), w.to(dev), offsets.to(dev), out=out, config=cfg)
        out = out.cpu()
        ref = _grouped_ref(x, w, offsets)
        rtol, atol = TOL[dtype]
        written = ~ref[:, 0].isnan()
        torch.testing.assert_close(out[written].double(), ref[written], rtol=rtol, atol=atol)
        assert out[~written].isnan().all(), "rows outside the groups were written"


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("layout", ["kn", "nk"])
def test_grouped_gemm_tma_path(dtype, layout, monkeypatch):
    """The TMA load path (``DITRON_GEMM_TMA=1``: the interpreter emulates descriptors) on
    both weight layouts, K not a multiple of the block where the layout allows it, groups
    of 0, 1 and > 2 tiles, a first offset > 0; it is really taken, and refused (pointer
    path, still right) for a ``[G, K, N]`` weight whose K is not a multiple of the block and
    for a transposed fp32 weight."""
    from ditron.kernels import grouped_gemm as module

    taken = []
    real = module._descriptors
    monkeypatch.setattr(module, "_descriptors",
                        lambda *a: taken.append(real(*a) is not None) or real(*a))
    monkeypatch.setenv("DITRON_GEMM_TMA", "1")
    g = _gen(4, int(dtype == torch.float32), int(layout == "nk"))
    cfg = GroupedGemmConfig(16, 16, 16, num_warps=4, num_stages=1)
    counts = [3, 0, 37, 1, 16]
    offsets = torch.tensor([0, *counts]).cumsum(0) + 2
    N = 24
    for K in (48, 40):
        R = int(offsets[-1]) + 5
        x = torch.randn(R, K, generator=g).to(dtype)
        if layout == "kn":
            w = torch.randn(len(counts), K, N, generator=g).to(dtype)
        else:
            w = torch.randn(len(counts), N, K, generator=g).to(dtype).transpose(1, 2)
        ref = _grouped_ref(x, w, offsets)
        written = ~ref[:, 0].isnan()
        for _ in range(2):
            out = torch.full((R, N), float("nan"), dtype=dtype)
            grouped_gemm(x, w, offsets, out=out, config=cfg)
            rtol, atol = TOL[dtype]
            torch.testing.assert_close(out[written].double(), ref[written], rtol=rtol,
                                       atol=atol)
            assert out[~written].isnan().all(), "rows outside the groups were written"
    # K = 48 divides into blocks, 40 does not: no [G * K, N] descriptor then; no [G * N, K]
    # one for fp32 ever (descriptors.transposable)
    kn, nk = [True, True, False, False], [dtype != torch.float32] * 4
    assert taken == (kn if layout == "kn" else nk), "the TMA path was not taken (or taken " \
        "where it must not be)"


def _wgrad_operands(g, R: int, K: int, N: int, offsets, dtype):
    """``x [R, K]``, ``dy [R, N]`` random, NaN outside the groups' rows (a NaN that leaks
    into a sum fails the check)."""
    x = torch.randn(R, K, generator=g).to(dtype)
    dy = torch.randn(R, N, generator=g).to(dtype)
    for t in (x, dy):
        t[: int(offsets[0])], t[int(offsets[-1]):] = float("nan"), float("nan")
    return x, dy


def _check_wgrad(dw, x, dy, offsets, dtype) -> None:
    for e in range(len(offsets) - 1):
        lo, hi = int(offsets[e]), int(offsets[e + 1])
        ref = x[lo:hi].double().T @ dy[lo:hi].double()
        rtol, atol = TOL[dtype]
        torch.testing.assert_close(dw[e].double(), ref, rtol=rtol, atol=atol, msg=f"group {e}")


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_grouped_gemm_wgrad_matches_torch(dtype, backend):
    """``dw[g] = x_g.T @ dy_g``: groups of 0, 1 and > 1 blocks of rows, a first offset > 0,
    NaN rows outside the groups (they must not leak into a sum), K and N not multiples of
    the blocks, the tile order's bands whole and cut; ``out`` poisoned."""
    from ditron.kernels.grouped_gemm import grouped_gemm_wgrad

    g = _gen(5, int(dtype == torch.float32))
    counts = [3, 0, 37, 1, 13]  # the last group's block reaches into the NaN rows
    offsets = torch.tensor([0, *counts]).cumsum(0) + 2
    R, K, N = int(offsets[-1]) + 5, 56, 40  # 4 K tiles, 3 N tiles
    for group_k in (8, 3):  # one band of K tiles; a band of 3 and one of 1
        cfg = GroupedGemmConfig(16, 16, 16, num_warps=4, num_stages=1, group_m=group_k)
        x, dy = _wgrad_operands(g, R, K, N, offsets, dtype)
        dev = "cuda" if backend == "cuda" else "cpu"
        dw = torch.full((len(counts), K, N), float("nan"), dtype=dtype, device=dev)
        grouped_gemm_wgrad(x.to(dev), dy.to(dev), offsets.to(dev), out=dw, config=cfg)
        _check_wgrad(dw.cpu(), x, dy, offsets, dtype)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_grouped_gemm_wgrad_tma_path(dtype, monkeypatch, backend):
    """The weight gradient's TMA path (``DITRON_GEMM_TMA=1``): whole blocks of rows through
    descriptors, the partial last one through masked pointers; groups of 0, 1, exactly 2
    and 2 + a part blocks, NaN rows around the groups; taken for row-major 16-bit operands
    and refused (pointer path, still right) for a transposed ``x`` and for fp32."""
    from ditron.kernels import grouped_gemm as module

    taken = []
    real = module._wgrad_descriptors
    monkeypatch.setattr(module, "_wgrad_descriptors",
                        lambda *a: taken.append(real(*a) is not None) or real(*a))
    monkeypatch.setenv("DITRON_GEMM_TMA", "1")
    g = _gen(6, int(dtype == torch.float32))
    cfg = GroupedGemmConfig(16, 16, 16, num_warps=4, num_stages=1, tma=True)
    counts = [3, 0, 32, 1, 37]
    offsets = torch.tensor([0, *counts]).cumsum(0) + 2
    R, K, N = int(offsets[-1]) + 5, 40, 24
    for transposed in (False, True, False):
        x, dy = _wgrad_operands(g, R, K, N, offsets, dtype)
        dev = "cuda" if backend == "cuda" else "cpu"
        x_arg = x.t().contiguous().t() if transposed else x
        dw = module.grouped_gemm_wgrad(x_arg.to(dev), dy.to(dev), offsets.to(dev),
                                       config=cfg)
        _check_wgrad(dw.cpu(), x, dy, offsets, dtype)
    # fp32 never loads transposed blocks through descriptors (descriptors.transposable)
    want = [True, False, True] if dtype != torch.float32 else []
    assert taken == want, "the TMA path was not taken where it should be"


def test_default_configs():
    """The defaults by device, dtype and rows per group (no GPU needed: only the device's
    type is read)."""
    from ditron.kernels import grouped_gemm as module

    cuda, cpu = torch.device("cuda"), torch.device("cpu")
    picks = {"large": module.default_config(cuda, torch.bfloat16),
             "many rows": module.default_config(cuda, torch.float16, 4096.0),
             "small": module.default_config(cuda, torch.bfloat16, module.SMALL_GROUP_ROWS),
             "fp32": module.default_config(cuda, torch.float32, 8.0),
             "cpu": module.default_config(cpu, torch.bfloat16),
             "wgrad": module.default_wgrad_config(cuda, torch.bfloat16),
             "wgrad fp32": module.default_wgrad_config(cuda, torch.float32),
             "wgrad cpu": module.default_wgrad_config(cpu, torch.bfloat16)}
    assert all(isinstance(c, GroupedGemmConfig) for c in picks.values()), picks
    shape = {name: (c.block_m, c.block_n, c.block_k, c.num_stages, c.tma)
             for name, c in picks.items()}
    assert shape["large"] == shape["many rows"] == (128, 256, 64, 3, True)
    assert shape["small"] == (64, 128, 64, 4, False)
    assert shape["fp32"][:3] == shape["wgrad fp32"][:3] == (128, 128, 32)
    assert shape["wgrad"] == (128, 256, 64, 4, True)
    assert shape["cpu"] == shape["wgrad cpu"] and shape["cpu"][:3] == (64, 64, 32)


def test_grouped_gemm_rows_per_group_picks_the_config(monkeypatch):
    """``rows_per_group`` reaches ``default_config`` (``R / G`` without it); a given config
    wins; the public op refuses a negative or non-numeric hint."""
    from ditron.kernels import grouped_gemm as module

    seen = []
    real = module.default_config
    monkeypatch.setattr(module, "default_config",
                        lambda dev, dtype, rows=None, *ops: seen.append(rows)
                        or real(dev, dtype, rows, *ops))
    x, w, o = torch.randn(12, 8), torch.randn(3, 8, 5), torch.tensor([0, 2, 7, 9])
    ref = _grouped_ref(x, w, o)[:9].float()
    for hint in (None, 2.5):
        out = ditron.ops.grouped_gemm(x, w, o, rows_per_group=hint)
        torch.testing.assert_close(out[:9], ref, rtol=1e-4, atol=1e-4)
    grouped_gemm(x, w, o, config=GroupedGemmConfig(16, 16, 16, num_stages=1),
                 rows_per_group=7.0)
    assert seen == [12 / 3, 2.5]
    for bad in (-1.0, float("nan"), "4", True):
        with pytest.raises(ValueError, match="rows_per_group must be a number >= 0"):
            ditron.ops.grouped_gemm(x, w, o, rows_per_group=bad)


def test_grouped_gemm_refuses_bad_input():
    x, w, o = torch.zeros(4, 3), torch.zeros(2, 3, 5), torch.tensor([0, 2, 4])
    gg = grouped_gemm
    for words, args in [("need x \\[R, K\\] and w \\[G, K, N\\]", (x, w[:, :2], o)),
                        ("share a dtype", (x, w.double(), o)),
                        ("offsets must be an integer tensor \\[G \\+ 1\\]", (x, w, o[:2])),
                        ("offsets must be an integer", (x, w, o.float())),
                        # read (or written) past x's rows / before them, silently
                        ("offsets must rise from >= 0 to <= R = 4", (x, w, o + 1)),
                        ("offsets must rise .* got \\[-1, 2, 4\\]", (x, w, o - o.eq(0).long())),
                        ("offsets must rise", (x, w, torch.tensor([0, 3, 2])))]:
        with pytest.raises(ValueError, match=words):
            gg(*args)
    from ditron.kernels.grouped_gemm import grouped_gemm_wgrad

    with pytest.raises(ValueError, match="grouped_gemm_wgrad: offsets must rise"):
        grouped_gemm_wgrad(x, torch.zeros(4, 5), o + 1)
    with pytest.raises(ValueError, match="out must be \\[4, 5\\]"):
        gg(x, w, o, out=torch.empty(4, 4))


# -- dispatch / combine (multi-rank) ------------------------------------------------------
def _routing(call: int, rank: int, w: int, experts: int, k: int, hidden: int, dtype):
    """A rank's tokens, expert ids (some -1) and weights in call ``call``; rank 1 has no
    tokens in call 1."""
    tokens = 0 if (call == 1 and rank == 1) else 5 + 3 * rank + call
    g = _gen(call, rank, w, 7)
    x = torch.randn(tokens, hidden, generator=g).to(dtype)
    ids = torch.randint(0, experts, (tokens, k), generator=g)
    ids[torch.rand(tokens, k, generator=g) < 0.1] = -1
    weights = torch.rand(tokens, k, generator=g)
    return x, ids, weights


def _experts(call: int, experts: int, hidden: int, ffn: int, dtype):
    g = _gen(call, 99)
    return (torch.randn(experts, hidden, ffn, generator=g).div(hidden ** 0.5).to(dtype),
            torch.randn(experts, ffn, hidden, generator=g).div(ffn ** 0.5).to(dtype))


def _kept(w: int, experts: int, cap: int, routings: list[torch.Tensor]) -> list[torch.Tensor]:
    """Per source rank, a bool [T, k]: copy kept at its destination (each destination
    takes sources 0, 1, ... in order, each source's copies by expert id, up to ``cap``)."""
    local = experts // w
    kept = [torch.zeros(ids.shape, dtype=torch.bool) for ids in routings]
    for q in range(w):
        taken = 0
        for s, ids in enumerate(routings):
            flat = ids.reshape(-1)
            for c in torch.argsort(torch.where(flat < 0, experts, flat), stable=True).tolist():
                if flat[c] >= 0 and int(flat[c]) // local == q:
                    kept[s].view(-1)[c] = taken < cap
                    taken += 1
    return kept


def _expert_rows(gathered: list, kept: list[torch.Tensor], expert: int) -> list[torch.Tensor]:
    """The rows expert ``expert`` receives, in order: ``gathered[s] = (rows, ids)`` of
    source rank ``s`` (``rows`` a row per token), its copies taken by expert id (stable),
    those ``kept`` at the destination."""
    out = []
    for s, (gx, gi) in enumerate(gathered):
        flat = gi.reshape(-1)
        for c in torch.argsort(flat, stable=True).tolist():
            if int(flat[c]) == expert and kept[s].view(-1)[c]:
                out.append(gx[c // gi.shape[1]])
    return out


def check_moe(cap_rows: int | None) -> int:
    rt = current()
    w, me, dev = rt.world.world_size, rt.world.rank, rt.world.device
    host = rt.host_group
    poison_empty()
    checks = 0
    for call, (dtype, k, per_rank) in enumerate([(torch.float32, 2, 2), (torch.bfloat16, 3, 1),
                                                 (torch.float32, 1, 3)]):
        experts, hidden, ffn = per_rank * w, 24, 20
        routings = [_routing(call, r, w, experts, k, hidden, dtype) for r in range(w)]
        x, ids, weights = routings[me]
        max_tokens = max(r[0].shape[0] for r in routings)
        w1, w2 = _experts(call, experts, hidden, ffn, dtype)
        mine = slice(me * per_rank, (me + 1) * per_rank)
        d = ditron.ops.moe_dispatch(x.to(dev), ids.to(dev), experts, max_tokens=max_tokens,
                                    max_recv_rows=cap_rows)
        cap = w * max_tokens * k if cap_rows is None else cap_rows
        assert d.x.shape == (cap, hidden)
        assert d.mean_rows_per_expert == w * max_tokens * k / experts

        # the dispatch against the gathered routings (pure data movement: exact)
        gathered = [None] * w
        dist.all_gather_object(gathered, (x, ids), group=host)
        kept = _kept(w, experts, cap, [g[1] for g in gathered])
        offsets = d.expert_offsets.cpu()
        assert offsets[0] == 0
        counts = d.tokens_per_expert.cpu().tolist()
        for e in range(per_rank):
            rows = _expert_rows(gathered, kept, me * per_rank + e)
            want = torch.stack(rows) if rows else torch.empty(0, hidden, dtype=dtype)
            got = d.x[int(offsets[e]):int(offsets[e + 1])].cpu()
            assert torch.equal(got, want), f"rank {me} call {call} expert {e}: rows differ"
            assert counts[e] == len(rows), f"rank {me} call {call} expert {e}: count"
            checks += 1

        # the layer: relu(x @ w1) @ w2 per expert, combined with the weights
        for repeat in range(2):
            h = ditron.ops.grouped_gemm(d.x, w1[mine].to(dev), d.expert_offsets)
            y = ditron.ops.grouped_gemm(torch.relu(h), w2[mine].to(dev), d.expert_offsets)
            out = ditron.ops.moe_combine(y, d, weights.to(dev) if repeat == 0 else None)
            ref = torch.zeros(x.shape[0], hidden)
            for t in range(x.shape[0]):
                for j in range(k):
                    e = int(ids[t, j])
                    if e >= 0 and kept[me][t, j]:
                        hid = torch.relu((x[t].float() @ w1[e].float()).to(dtype))
                        yv = (hid.float() @ w2[e].float()).to(dtype).float()
                        ref[t] += yv * (weights[t, j] if repeat == 0 else 1.0)
            rtol, atol = TOL[dtype]
            assert out.dtype == dtype and out.shape == (x.shape[0], hidden)
            torch.testing.assert_close(out.cpu().float(), ref, rtol=rtol, atol=atol,
                                       msg=f"rank {me} call {call} repeat {repeat}")
            checks += 1
    return checks


@pytest.mark.parametrize("world_size", [1, 2, 3, 4])
def test_moe_layer_matches_torch(world_size, backend):
    counts = ditron.launch(check_moe, world_size, None, backend=backend)
    assert counts == [12] * world_size  # (experts + 2 layer checks) per call


def test_moe_drops_copies_past_the_capacity(backend):
    """Receivers keep 4 rows: the copies of the highest source ranks are dropped and
    count zero in the combine."""
    counts = ditron.launch(check_moe, 3, 4, backend=backend)
    assert counts == [12] * 3


@pytest.mark.parametrize("world_size,cap_rows", [(4, None), (3, 4)])
def test_moe_layer_across_simulated_nodes(world_size, cap_rows, monkeypatch, backend):
    """Nodes of two ranks: the all-to-alls take their host-synchronised form
    (``ops/a2a_nodes.py``); the same dispatch, drops and layer as on one node."""
    monkeypatch.setenv("DITRON_LOCAL_WORLD_SIZE", "2")
    counts = ditron.launch(check_moe, world_size, cap_rows, backend=backend)
    assert counts == [12] * world_size


def check_fp8_dispatch(cap_rows: int | None) -> int:
    """fp8 token rows (e4m3 and e5m2) with per-token scale rows (``x_scales``: fp32 ``[T,
    2]``, then bf16 ``[T]``) against the routings gathered with torch.distributed: the rows'
    bits and the scales land grouped by expert, exactly; ranks of different sizes, one
    without tokens, unrouted copies, and with ``cap_rows`` drops."""
    rt = current()
    w, me, dev = rt.world.world_size, rt.world.rank, rt.world.device
    poison_empty()
    checks = 0
    for call, (dtype, k, per_rank) in enumerate([(torch.float8_e4m3fn, 2, 2),
                                                 (torch.float8_e5m2, 3, 1),
                                                 (torch.float8_e4m3fn, 1, 3)]):
        experts, hidden = per_rank * w, 32
        routings = [_routing(call, r, w, experts, k, hidden, torch.float32) for r in range(w)]
        x, ids, _ = routings[me]
        x = (x * 4).to(dtype)
        g = _gen(call, me, 31)
        scales = (torch.rand(x.shape[0], 2, generator=g) if call % 2 == 0
                  else torch.rand(x.shape[0], generator=g).to(torch.bfloat16))
        max_tokens = max(r[0].shape[0] for r in routings)
        d = ditron.ops.moe_dispatch(x.to(dev), ids.to(dev), experts, max_tokens=max_tokens,
                                    max_recv_rows=cap_rows, x_scales=scales.to(dev))
        cap = w * max_tokens * k if cap_rows is None else cap_rows
        assert d.x.dtype == dtype and d.x_scales.dtype == scales.dtype
        assert d.x_scales.shape == (cap, *scales.shape[1:])
        gathered = [None] * w
        dist.all_gather_object(gathered, (x.view(torch.uint8), scales, ids),
                               group=rt.host_group)
        kept = _kept(w, experts, cap, [gt[2] for gt in gathered])
        offsets = d.expert_offsets.cpu()
        for e in range(per_rank):
            lo, hi = int(offsets[e]), int(offsets[e + 1])
            for got, part in ((d.x.view(torch.uint8), 0), (d.x_scales, 1)):
                rows = _expert_rows([(gt[part], gt[2]) for gt in gathered], kept,
                                    me * per_rank + e)
                want = (torch.stack(rows) if rows
                        else torch.empty(0, *got.shape[1:], dtype=got.dtype))
                assert torch.equal(got[lo:hi].cpu(), want), \
                    f"rank {me} call {call} expert {e} part {part}"
                checks += 1
    x = torch.zeros(4, 8, device=dev).to(torch.float8_e4m3fn)
    ids = torch.zeros(4, 1, dtype=torch.int64, device=dev)
    for bad in (torch.ones(3, 2, device=dev), torch.ones(4, 2, dtype=torch.int32, device=dev)):
        with pytest.raises(ValueError, match=r"x_scales must be a floating \[4, \.\.\.\]"):
            ditron.ops.moe_dispatch(x, ids, w, x_scales=bad)
    assert ditron.ops.moe_dispatch(x, ids, w).x_scales is None
    return checks


@pytest.mark.parametrize("world_size,cap_rows,node_size",
                         [(1, None, 1), (2, None, 2), (3, 5, 3), (4, None, 4), (4, 9, 2)])
def test_fp8_dispatch_with_scales(world_size, cap_rows, node_size, backend, monkeypatch):
    monkeypatch.setenv("DITRON_LOCAL_WORLD_SIZE", str(node_size))  # 2: two simulated nodes
    counts = ditron.launch(check_fp8_dispatch, world_size, cap_rows, backend=backend)
    # (experts per rank) x 2 parts, per call
    assert counts == [(2 + 1 + 3) * 2] * world_size


def check_refusals() -> int:
    dev, me = ditron.world().device, ditron.world().rank
    ops = ditron.ops
    x = torch.randn(6, 8, device=dev)
    ids = torch.zeros(6, 2, dtype=torch.int64, device=dev)
    cases = [
        # ranks with different token counts and no common max_tokens: named, on every rank
        ("ranks disagree on the call \\(max_tokens, max_recv_rows differ\\)",
         lambda: ops.moe_dispatch(x[:6 - me], ids[:6 - me], 4)),
        ("num_experts must be a positive multiple", lambda: ops.moe_dispatch(x, ids, 3)),
        ("x must be \\[tokens, hidden\\]", lambda: ops.moe_dispatch(x[0], ids, 4)),
        ("topk_ids must be \\[tokens, k\\]", lambda: ops.moe_dispatch(x, ids[:5], 4)),
        ("topk_ids must be integers", lambda: ops.moe_dispatch(x, ids.float(), 4)),
        ("max_tokens must be an int >= this rank's 6", lambda: ops.moe_dispatch(
            x, ids, 4, max_tokens=5)),
        ("expert id 4 >= num_experts 4", lambda: ops.moe_dispatch(x, ids + 4, 4)),
    ]
    for words, fn in cases:
        with pytest.raises(ValueError, match=words):
            fn()
    # a bad id on rank 1 only: rank 0 raises too, naming it (it used to wait in the exchange)
    words = "expert ids out of range:\n  rank 1: expert id 5 >= num_experts 4$"
    with pytest.raises(ValueError, match=words):
        ops.moe_dispatch(x, torch.where(ids == 0, 5 * me, ids), 4)
    d = ops.moe_dispatch(x, ids, 4)
    with pytest.raises(ValueError, match="y must be floating"):
        ops.moe_combine(d.x[:3], d)
    with pytest.raises(ValueError, match="topk_weights must be floating \\[6, 2\\]"):
        ops.moe_combine(d.x, d, torch.ones(6, 3, device=dev))
    with pytest.raises(TypeError, match="what moe_dispatch returned"):
        ops.moe_combine(d.x, "routing")
    out = ops.moe_combine(d.x, d)  # identity experts: every token comes back k times
    torch.testing.assert_close(out, 2 * x)
    return len(cases) + 5


def test_moe_refuses_bad_input(backend, monkeypatch):
    monkeypatch.setenv("DITRON_WAIT_TIMEOUT", "60")  # debug mode: expert ids read and checked
    assert ditron.launch(check_refusals, 2, backend=backend) == [12, 12]


def check_combine_in_another_world() -> int:
    """Two worlds of pairs in four processes ({0, 1} / {2, 3} and {0, 2} / {1, 3}): a
    combine in another world than its dispatch is refused on every rank (it sent the rows
    to the other world's ranks and returned wrong sums, silently), for ``ditron.ops`` and
    ``ditron.nn.moe``; in the dispatch's world it is right."""
    from ditron.nn import moe as nn_moe

    me = dist.get_rank()
    tp = ditron.init(group=[me - me % 2, me - me % 2 + 1])
    ep = ditron.init(group=[me % 2, me % 2 + 2])
    dev = ep.device
    x = torch.randn(4, 8, generator=_gen(me, 5)).to(dev)
    ids = torch.randint(0, 2, (4, 2), generator=_gen(me, 6)).to(dev)
    for module in (ditron.ops, nn_moe):
        with ditron.use(tp):
            d = module.moe_dispatch(x, ids, 2)
        assert d.world == tp
        with pytest.raises(ValueError, match=f"the dispatch ran in the world over global "
                                             f"ranks \\{list(tp.global_ranks)}"):
            module.moe_combine(d.x, d)
        with ditron.use(tp):  # identity experts: each token comes back k times
            torch.testing.assert_close(module.moe_combine(d.x, d), 2 * x)
    return 2


def test_combine_refuses_a_dispatch_of_another_world(backend):
    assert ditron.launch(check_combine_in_another_world, 4, backend=backend) == [2] * 4


def _layer_reference(x, ids, weights, w1, w2):
    ref = torch.zeros(x.shape[0], x.shape[1])
    for t in range(x.shape[0]):
        for j in range(ids.shape[1]):
            e = int(ids[t, j])
            if e >= 0:
                hid = torch.relu((x[t].float() @ w1[e].float()).to(x.dtype))
                ref[t] += weights[t, j] * (hid.float() @ w2[e].float()).to(x.dtype).float()
    return ref


def _moe_graph() -> int:
    """Capture a whole MoE layer (dispatch, two grouped GEMMs, combine) in one CUDA graph;
    replay it with new tokens and new routing (no host synchronisation inside)."""
    w, me = ditron.world().world_size, ditron.world().rank
    tokens, hidden, ffn, per_rank, k = 37, 64, 48, 3, 2
    experts = per_rank * w
    w1, w2 = _experts(5, experts, hidden, ffn, torch.bfloat16)
    mine = slice(me * per_rank, (me + 1) * per_rank)
    lw1, lw2 = w1[mine].cuda(), w2[mine].cuda()
    x = torch.zeros(tokens, hidden, device="cuda", dtype=torch.bfloat16)
    ids = torch.zeros(tokens, k, device="cuda", dtype=torch.int64)
    weights = torch.ones(tokens, k, device="cuda")

    def layer():
        d = ditron.ops.moe_dispatch(x, ids, experts)
        h = torch.relu(ditron.ops.grouped_gemm(d.x, lw1, d.expert_offsets))
        return ditron.ops.moe_combine(ditron.ops.grouped_gemm(h, lw2, d.expert_offsets), d,
                                      weights)

    layer()  # warm-up: workspaces, compilation
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = layer()
    checks = 0
    for it in range(3):
        xr, idr, wr = _routing(it, me, w, experts, k, hidden, torch.bfloat16)
        xr, idr, wr = xr[:tokens], idr[:tokens], wr[:tokens]
        n = xr.shape[0]
        x.zero_()
        ids.fill_(-1)
        x[:n].copy_(xr)
        ids[:n].copy_(idr)
        weights[:n].copy_(wr)
        out.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        ref = _layer_reference(xr, idr, wr, w1, w2)
        torch.testing.assert_close(out[:n].float().cpu(), ref, rtol=3e-2, atol=3e-2,
                                   msg=f"rank {me} replay {it}")
        assert (out[n:] == 0).all(), "unrouted padding tokens must come out zero"
        checks += 1
    return checks


@pytest.mark.gpu
def test_moe_layer_in_cuda_graph():
    assert ditron.launch(_moe_graph, 2, backend="cuda") == [3, 3]


@pytest.mark.gpu
def test_grouped_gemm_methods_gpu():
    """Every method of ``ops.grouped_gemm`` on bf16, row-major and transposed weights, an
    empty group; each equals the reference."""
    g = _gen(3, 1)
    counts = [5, 0, 300, 17]
    offsets = torch.tensor([0, *counts]).cumsum(0)
    R, K, N = int(offsets[-1]) + 3, 256, 136
    x = torch.randn(R, K, generator=g).bfloat16()
    for w in (torch.randn(len(counts), K, N, generator=g).bfloat16(),
              torch.randn(len(counts), N, K, generator=g).bfloat16().transpose(1, 2)):
        ref = _grouped_ref(x, w, offsets)[: int(offsets[-1])]
        for method in ("auto", "triton", "torch"):
            out = ditron.ops.grouped_gemm(x.cuda(), w.cuda(), offsets.cuda(), method=method)
            torch.testing.assert_close(out[: int(offsets[-1])].double().cpu(), ref,
                                       rtol=3e-2, atol=3e-1, msg=method)
    with pytest.raises(ValueError, match="method='torch' needs bf16 CUDA tensors"):
        ditron.ops.grouped_gemm(x.float(), w.float(), offsets, method="torch")
    with pytest.raises(ValueError, match="method must be one of"):
        ditron.ops.grouped_gemm(x, w, offsets, method="cublas")


# -- the device all-to-all under MoE: bad or odd split sizes, one rank's bad arguments ------
def check_a2a_split_cut() -> list:
    """Splits that are negative or past the send rows (rank 0 only): on one node as across
    nodes, a negative split sends nothing and the rest are cut to the rows left; the
    receivers' ``out_splits`` count the rows that came, and those rows are right."""
    w, me, dev = ditron.world().world_size, ditron.world().rank, ditron.world().device
    poison_empty()
    x = torch.arange(12, dtype=torch.float32, device=dev).view(6, 2)
    got = []
    for bad in ([7] + [3] * (w - 1), [-2] + [3] * (w - 1)):
        splits = torch.tensor(bad if me == 0 else [3] * w, device=dev)
        out, out_splits = ditron.ops.all_to_all_device(x, splits, 6 * w + 4, zero_missing=True)
        got.append((out_splits.tolist(), out[:, 0].tolist()))
    return got


@pytest.mark.parametrize("node_size", [2, 1])
def test_all_to_all_device_cuts_bad_splits_like_across_nodes(node_size, monkeypatch, backend):
    """On one node the receivers' ``out_splits`` reported rank 0's split of 7 (it has 6
    rows) and the rows it never sent came out as stale inbox rows; a split of -2 read and
    wrote outside the buffers (denormal garbage on rank 1). Across nodes both were cut."""
    monkeypatch.setenv("DITRON_LOCAL_WORLD_SIZE", str(node_size))  # 1: two simulated nodes
    r0, r1 = ditron.launch(check_a2a_split_cut, 2, backend=backend)
    z = [0.0] * 7
    assert r0[0] == ([6, 3], [0.0, 2.0, 4.0, 6.0, 8.0, 10.0, 0.0, 2.0, 4.0] + z)
    assert r1[0] == ([0, 3], [6.0, 8.0, 10.0] + [0.0] * 13)
    assert r0[1] == ([0, 3], [0.0, 2.0, 4.0] + [0.0] * 13)
    assert r1[1] == ([3, 3], [0.0, 2.0, 4.0, 6.0, 8.0, 10.0] + [0.0] * 10)


def check_one_rank_refuses(case: str) -> str:
    """Rank 1 alone passes a bad argument; every rank must raise (none may wait for it),
    and a good call afterwards must still work."""
    w, me, dev = ditron.world().world_size, ditron.world().rank, ditron.world().device
    ops = ditron.ops
    x = torch.arange(12, dtype=torch.float32, device=dev).view(6, 2)
    splits = torch.full((w,), 3, dtype=torch.int64, device=dev)
    bad = me == 1
    calls = {
        "splits": lambda: ops.all_to_all_device(x, splits[:w - bad], 6 * w),
        "recv_index": lambda: ops.all_to_all_device(
            x, splits, 6 * w, recv_index=torch.arange(6 * w - bad, device=dev)),
        "send_scale": lambda: ops.all_to_all_device(
            x, splits, 6 * w, send_scale=torch.ones(6 - bad, device=dev)),
        "extra": lambda: ops.all_to_all_device_pair(x, torch.ones(6 - bad, device=dev),
                                                    splits, 6 * w),
        "inbox": lambda: ops.all_to_all_inbox(x.double() if bad else x, splits, 6 * w),
        "counts": lambda: ops.exchange_counts(torch.ones(w, 3, device=dev,
                                                         dtype=torch.float32 if bad
                                                         else torch.int64)),
        "send_index": lambda: ops.all_to_all_device(
            x, splits, 6 * w, send_index=torch.arange(3 * w, device=dev) + 10 * bad),
    }
    with pytest.raises(ValueError) as err:
        calls[case]()
    out, _ = ops.all_to_all_device(x, torch.ones(w, dtype=torch.int64, device=dev), 6 * w)
    assert out[:w, 0].tolist() == [2.0 * me] * w  # row me of every rank
    return str(err.value)


@pytest.mark.parametrize("case", ["splits", "recv_index", "send_scale", "extra", "inbox",
                                  "counts", "send_index"])
def test_a_bad_argument_on_one_rank_raises_on_every_rank(case, monkeypatch, backend):
    """The device all-to-alls checked their arguments on each rank alone: the rank with a
    bad one raised and the others waited for it forever in the call's agreement gather (a
    bad ``send_index``, checked in debug mode, left them in the exchange until the wait
    timed out, and later calls out of step)."""
    monkeypatch.setenv("DITRON_WAIT_TIMEOUT", "60")
    monkeypatch.setenv("DITRON_LAUNCH_TIMEOUT", "60")
    errors = ditron.launch(check_one_rank_refuses, 2, case, backend=backend)
    for rank, text in enumerate(errors):
        assert "rank 1" in text or rank == 1, text
    assert "send_index holds 10" in errors[0] if case == "send_index" else True
