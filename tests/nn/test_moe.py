"""ditron.nn expert parallelism (ExpertParallelMLP and its functions): output and every
gradient against a float64 torch model of all ranks' tokens and all experts."""

from __future__ import annotations

from contextlib import nullcontext

import pytest
import torch

import ditron
from ditron.runtime.world import current

from ..ops.poison import poison_empty
from ..ops.test_moe import _kept

TOL = {torch.float32: (1e-4, 1e-4), torch.bfloat16: (5e-2, 5e-2)}


def _expert(x, w1, w2, gated: bool):
    """One expert on one row, as the model code of a (gated) MLP writes it."""
    if not gated:
        return torch.nn.functional.gelu(x @ w1) @ w2
    ffn = w2.shape[0]
    return (torch.nn.functional.silu(x @ w1[:, :ffn]) * (x @ w1[:, ffn:])) @ w2


def _reference(xs, ids, wts, kept, w1, w2, gs, gated: bool = False):
    """Float64 outputs and gradients of ``sum_s <out_s, g_s>`` (lists over ranks)."""
    xs = [x.detach().double().requires_grad_() for x in xs]
    wts = [w.detach().double().requires_grad_() for w in wts]
    w1 = w1.double().requires_grad_()
    w2 = w2.double().requires_grad_()
    outs = []
    for x, i, wt, kp in zip(xs, ids, wts, kept, strict=True):
        out = torch.zeros_like(x)
        for j in range(i.shape[1]):
            for t in range(x.shape[0]):
                e = int(i[t, j])
                if e >= 0 and kp[t, j]:
                    y = _expert(x[t], w1[e], w2[e], gated)
                    out = out.index_add(0, torch.tensor([t]), (wt[t, j] * y)[None])
        outs.append(out)
    loss = sum((o * g.double()).sum() for o, g in zip(outs, gs, strict=True))
    leaves = [w1, w2, *xs, *wts]
    (loss + 0 * sum(t.sum() for t in leaves)).backward()  # zero gradients where none flow
    return outs, [x.grad for x in xs], [w.grad for w in wts], w1.grad, w2.grad


def check_layer(cap_rows: int | None, gated: bool = False) -> int:
    rt = current()
    w, me, dev = rt.world.world_size, rt.world.rank, rt.world.device
    poison_empty()
    checks = 0
    for call, dtype in enumerate((torch.float32, torch.bfloat16, torch.float32)):
        per_rank, k, hidden, ffn = 2, 2, 12, 10
        experts = per_rank * w
        g = torch.Generator().manual_seed(100 + call)
        tokens = [0 if (call == 1 and r == w - 1) else 4 + r + call for r in range(w)]
        xs = [torch.randn(t, hidden, generator=g).to(dtype) for t in tokens]
        ids = [torch.randint(0, experts, (t, k), generator=g) for t in tokens]
        for i in ids:
            i[torch.rand(i.shape, generator=g) < 0.15] = -1
        wts = [torch.rand(t, k, generator=g) for t in tokens]
        gs = [torch.randn(t, hidden, generator=g).to(dtype) for t in tokens]
        act = torch.nn.functional.silu if gated else torch.nn.functional.gelu
        layer = ditron.nn.ExpertParallelMLP(hidden, ffn, experts, dtype=dtype, activation=act,
                                            gated=gated, max_recv_rows=cap_rows)
        width = 2 * ffn if gated else ffn
        full1 = torch.randn(experts, hidden, width, generator=g).div(hidden ** 0.5).to(dtype)
        full2 = torch.randn(experts, ffn, hidden, generator=g).div(ffn ** 0.5).to(dtype)
        mine = slice(me * per_rank, (me + 1) * per_rank)
        with torch.no_grad():
            layer.w1.copy_(full1[mine])
            layer.w2.copy_(full2[mine])
        x = xs[me].to(dev).requires_grad_()
        wt = wts[me].to(dev).requires_grad_()
        out = layer(x, ids[me].to(dev), wt, max_tokens=max(tokens))
        out.backward(gs[me].to(dev))
        cap = w * max(tokens) * k if cap_rows is None else cap_rows
        kept = _kept(w, experts, cap, ids)
        ref_out, ref_x, ref_w, ref_w1, ref_w2 = _reference(xs, ids, wts, kept, full1, full2, gs,
                                                           gated)
        rtol, atol = TOL[dtype]
        for what, got, want in [("out", out, ref_out[me]), ("x.grad", x.grad, ref_x[me]),
                                ("weights.grad", wt.grad, ref_w[me]),
                                ("w1.grad", layer.w1.grad, ref_w1[mine]),
                                ("w2.grad", layer.w2.grad, ref_w2[mine])]:
            assert got is not None and want is not None and got.shape == want.shape, what
            torch.testing.assert_close(got.cpu().double(), want, rtol=rtol, atol=atol,
                                       msg=f"rank {me} call {call}: {what}")
            checks += 1
    return checks


@pytest.mark.parametrize("world_size", [1, 2, 3, 4])
def test_expert_parallel_mlp_matches_torch(world_size, backend):
    assert ditron.launch(check_layer, world_size, None, backend=backend) == [15] * world_size


@pytest.mark.parametrize("world_size", [1, 2, 3, 4])
def test_gated_experts_match_torch(world_size, backend):
    """SwiGLU experts (``gated=True``, ``w1`` holding the gate's and the up projection's
    columns) against the model code of a gated MLP."""
    assert ditron.launch(check_layer, world_size, None, True, backend=backend) == \
        [15] * world_size


def test_expert_parallel_mlp_with_drops(backend):
    assert ditron.launch(check_layer, 3, 5, backend=backend) == [15] * 3


def check_autocast() -> int:
    """fp32 experts under bf16 autocast: bf16 output, fp32 gradients, equal to the float64
    model of the bf16-rounded tokens and weights."""
    rt = current()
    w, me, dev = rt.world.world_size, rt.world.rank, rt.world.device
    per_rank, k, hidden, ffn = 2, 2, 16, 12
    experts = per_rank * w
    g = torch.Generator().manual_seed(7)
    xs = [torch.randn(5 + r, hidden, generator=g) for r in range(w)]
    ids = [torch.randint(0, experts, (5 + r, k), generator=g) for r in range(w)]
    wts = [torch.rand(5 + r, k, generator=g) for r in range(w)]
    gs = [torch.randn(5 + r, hidden, generator=g).bfloat16() for r in range(w)]
    full1 = torch.randn(experts, hidden, ffn, generator=g) / hidden ** 0.5
    full2 = torch.randn(experts, ffn, hidden, generator=g) / ffn ** 0.5
    layer = ditron.nn.ExpertParallelMLP(hidden, ffn, experts)
    mine = slice(me * per_rank, (me + 1) * per_rank)
    with torch.no_grad():
        layer.w1.copy_(full1[mine])
        layer.w2.copy_(full2[mine])
    x = xs[me].to(dev).requires_grad_()
    with torch.autocast(dev.type, dtype=torch.bfloat16):
        out = layer(x, ids[me].to(dev), wts[me].to(dev), max_tokens=5 + w - 1)
    assert out.dtype == torch.bfloat16
    out.backward(gs[me].to(dev))
    assert layer.w1.grad.dtype == torch.float32 and x.grad.dtype == torch.float32
    kept = [torch.ones(i.shape, dtype=torch.bool) for i in ids]
    bf = [t.bfloat16() for t in xs]
    ref_out, ref_x, _, ref_w1, ref_w2 = _reference(bf, ids, wts, kept, full1.bfloat16(),
                                                    full2.bfloat16(), gs)
    for what, got, want in [("out", out, ref_out[me]), ("x.grad", x.grad, ref_x[me]),
                            ("w1.grad", layer.w1.grad, ref_w1[mine]),
                            ("w2.grad", layer.w2.grad, ref_w2[mine])]:
        torch.testing.assert_close(got.cpu().double(), want, rtol=5e-2, atol=5e-2,
                                   msg=f"rank {me} autocast: {what}")
    return 4


def test_expert_parallel_mlp_follows_autocast(backend):
    assert ditron.launch(check_autocast, 2, backend=backend) == [4, 4]


def check_rows_hint() -> list:
    """The layer's GEMMs (forward, and the input gradient's) pick their tiles for
    ``W * max_tokens * k / E`` rows per expert, not for the dispatch's capacity rows."""
    from ditron.kernels import grouped_gemm as module

    seen = []
    real = module.default_config
    module.default_config = lambda dev, dtype, rows=None, *ops: seen.append(rows) or real(
        dev, dtype, rows, *ops)
    try:
        dev = ditron.world().device
        layer = ditron.nn.ExpertParallelMLP(8, 4, 6)
        x = torch.randn(5, 8, device=dev, requires_grad=True)
        ids = torch.randint(0, 6, (5, 2), device=dev)
        layer(x, ids, torch.rand(5, 2, device=dev), max_tokens=7).sum().backward()
    finally:
        module.default_config = real
    return [r for r in seen if r is not None]


def test_layer_gemms_get_the_mean_rows_per_expert(backend):
    w, max_tokens, k, experts = 3, 7, 2, 6
    want = [w * max_tokens * k / experts] * 4  # two GEMMs, their two input gradients
    assert ditron.launch(check_rows_hint, w, backend=backend) == [want] * w


def check_from_experts() -> int:
    """A model's experts (``nn.Linear`` tuples, plain and gated) loaded into the layer: its
    output equals the modules applied to each routed copy."""
    rt = current()
    w, me, dev = rt.world.world_size, rt.world.rank, rt.world.device
    experts, hidden, ffn, k, T = 2 * w, 12, 8, 2, 5
    checks = 0
    for gated in (False, True):
        torch.manual_seed(21 + gated)  # the same modules on every rank
        mods = [tuple(torch.nn.Linear(*io, bias=False)
                      for io in [(hidden, ffn)] * (1 + gated) + [(ffn, hidden)])
                for _ in range(experts)]
        layer = ditron.nn.ExpertParallelMLP.from_experts(mods)
        assert layer.gated == gated and layer.w1.shape == (2, hidden, ffn * (1 + gated))
        g = torch.Generator().manual_seed(me)
        x = torch.randn(T, hidden, generator=g)
        ids = torch.randint(0, experts, (T, k), generator=g)
        wts = torch.rand(T, k, generator=g)
        out = layer(x.to(dev), ids.to(dev), wts.to(dev)).cpu()
        want = torch.zeros(T, hidden, dtype=torch.float64)
        with torch.no_grad():
            for t in range(T):
                for j in range(k):
                    *ins, down = (m.double() for m in mods[int(ids[t, j])])
                    v = x[t].double()
                    h = (torch.nn.functional.silu(ins[0](v)) * ins[1](v) if gated
                         else torch.nn.functional.gelu(ins[0](v)))
                    want[t] += wts[t, j] * down(h)
        torch.testing.assert_close(out.double(), want, rtol=1e-4, atol=1e-4,
                                   msg=f"rank {me} gated={gated}")
        checks += 1
    lin = torch.nn.Linear
    for words, bad in [("non-empty list", []),
                       ("non-empty list", [(lin(4, 3, bias=False),) * 4] * w),
                       ("without bias", [(lin(4, 3), lin(3, 4, bias=False))] * w),
                       ("module 1 must be an nn.Linear 3 -> 4",
                        [(lin(4, 3, bias=False), lin(3, 5, bias=False))] * w)]:
        with pytest.raises(ValueError, match=words):
            ditron.nn.ExpertParallelMLP.from_experts(bad)
        checks += 1
    return checks


@pytest.mark.parametrize("world_size", [1, 3])
def test_from_experts(world_size, backend):
    assert ditron.launch(check_from_experts, world_size, backend=backend) == [6] * world_size


def check_combine_grads(calls: int = 3) -> int:
    """The combine's gradients (``ditron.nn.moe.moe_combine``) against the formulation
    through ``moe_return_copies`` (copies times weights summed in torch, which the layer
    tests check against torch), with dropped (call 0) and unrouted copies; ``y``'s
    gradient rows past the groups (poisoned memory before the call) must be zero."""
    from ditron.nn import library
    from ditron.nn import moe as nn_moe

    poison_empty()
    w, me, dev = ditron.world().world_size, ditron.world().rank, ditron.world().device
    experts, k, T, N = 2 * w, 3, 5, 12
    for call in range(calls):
        g = torch.Generator().manual_seed(100 * me + call)
        ids = torch.randint(-1, experts, (T, k), generator=g).to(dev)
        d = nn_moe.moe_dispatch(torch.randn(T, N, device=dev), ids, experts,
                                max_recv_rows=2 * w * k if call == 0 else w * T * k)
        y0 = torch.randn(d.capacity, N, generator=g).to(dev)
        wts0 = torch.rand(T, k, generator=g).to(dev)
        grad = torch.randn(T, N, generator=g).to(dev)
        routing, sizes = library.routing_of(d)
        grads = []
        for way in ("combine", "copies"):
            y, wts = y0.clone().requires_grad_(), wts0.clone().requires_grad_()
            if way == "combine":
                out = nn_moe.moe_combine(y, d, wts)
            else:
                copies = torch.ops.ditron.moe_return_copies(y, routing, sizes,
                                                            library.world_key())
                out = (copies * wts[:, :, None]).sum(1)
            out.backward(grad)
            grads.append((out.detach(), y.grad, wts.grad))
        end = int(d.expert_offsets[-1])
        assert call == 0 or end < d.capacity  # rows past the groups to check
        for i, (got, want) in enumerate(zip(*grads, strict=True)):
            torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5,
                                       msg=f"rank {me} call {call}: output/grad {i}")
        past = grads[0][1][end:]
        assert torch.equal(past, torch.zeros_like(past)), f"rank {me} call {call}"
    return calls


@pytest.mark.parametrize("world_size", [1, 2, 3, 4])
def test_combine_gradients(world_size, backend):
    assert ditron.launch(check_combine_grads, world_size, backend=backend) == [3] * world_size


@pytest.mark.parametrize("world_size", [3, 4])
def test_layer_and_gradients_across_simulated_nodes(world_size, monkeypatch, backend):
    """Nodes of two ranks (the last one of one rank at W = 3): the layer (drops included)
    and the combine's gradients on the all-to-alls' host-synchronised form."""
    monkeypatch.setenv("DITRON_LOCAL_WORLD_SIZE", "2")
    assert ditron.launch(check_layer, world_size, 5, backend=backend) == [15] * world_size
    assert ditron.launch(check_combine_grads, world_size, backend=backend) == [3] * world_size


def check_layer_refusals() -> int:
    dev = ditron.world().device
    with pytest.raises(ValueError, match="num_experts must be a positive multiple"):
        ditron.nn.ExpertParallelMLP(8, 4, 3)
    for hidden, ffn, bad in ((0, 4, "hidden must be a positive int, got 0"),
                             (8, 2.5, "ffn must be a positive int, got 2.5")):
        with pytest.raises(ValueError, match=bad):
            ditron.nn.ExpertParallelMLP(hidden, ffn, 2)
    layer = ditron.nn.ExpertParallelMLP(8, 4, 2)
    x = torch.randn(3, 8, device=dev, dtype=torch.bfloat16)
    ids = torch.zeros(3, 1, dtype=torch.int64, device=dev)
    with pytest.raises(ValueError, match="input dtype torch.bfloat16 != weight dtype"):
        layer(x, ids, torch.ones(3, 1, device=dev))  # no autocast: no silent cast
    x = x.float()
    # refused before the dispatch (an int tensor was taken; a wrong shape failed in the
    # combine's kernel wrapper, after both grouped GEMMs)
    for wts in (torch.ones(3, 1, dtype=torch.int64, device=dev), torch.ones(3, 2, device=dev),
                [[1.0]] * 3):
        with pytest.raises(ValueError, match="ExpertParallelMLP: topk_weights must be "
                                             "floating \\[3, 1\\]"):
            layer(x, ids, wts)
    # a wrong hidden size: refused before the dispatch (it failed in the first grouped GEMM)
    with pytest.raises(ValueError, match=r"ExpertParallelMLP: x must be \[tokens, 8\]"):
        layer(torch.randn(3, 9, device=dev), ids, torch.ones(3, 1, device=dev))
    # a dtype the grouped GEMMs do not take: refused before the dispatch (it failed in the
    # first grouped GEMM, after the dispatch's all-to-all)
    wide = ditron.nn.ExpertParallelMLP(8, 4, 2, dtype=torch.float64)
    with pytest.raises(ValueError, match="ExpertParallelMLP: the experts compute in "
                                         "torch.float64; the grouped GEMMs take"):
        wide(x.double(), ids, torch.ones(3, 1, device=dev))
    assert layer(x, ids, torch.ones(3, 1, device=dev)).shape == x.shape
    return 9


def test_expert_parallel_mlp_refuses_bad_input(backend):
    assert ditron.launch(check_layer_refusals, 2, backend=backend) == [9, 9]


def check_one_rank_refuses() -> list[str]:
    """Rank 0 alone passes bad ``topk_weights``: every rank raises before the dispatch (the
    peers used to wait for it in the dispatch's agreement until the launch timed out)."""
    me, dev = ditron.world().rank, ditron.world().device
    layer = ditron.nn.ExpertParallelMLP(8, 4, 2)
    x, ids = torch.randn(3, 8, device=dev), torch.zeros(3, 1, dtype=torch.int64, device=dev)
    with pytest.raises(ValueError) as info:
        layer(x, ids, torch.ones(3, 2 if me == 0 else 1, device=dev))
    assert "topk_weights must be floating [3, 1]" in str(info.value)
    assert layer(x, ids, torch.ones(3, 1, device=dev)).shape == x.shape  # still usable
    return str(info.value).split(":")[0]


def test_one_rank_refusing_raises_on_every_rank(monkeypatch, backend):
    monkeypatch.setenv("DITRON_LAUNCH_TIMEOUT", "60")  # the old hang, short
    assert ditron.launch(check_one_rank_refuses, 2, backend=backend) == \
        ["ExpertParallelMLP", "ditron.nn.ExpertParallelMLP"]  # the layer's agreement


def check_non_int_sizes() -> list[str]:
    """Rank 0 alone passes a float ``max_tokens`` / ``num_experts`` to ``ditron.nn``'s
    dispatch: a ``ValueError`` naming it on every rank (it failed in the custom op's schema
    with a ``RuntimeError`` on rank 0, rank 1 erring on "ranks are in different collective
    calls"); ``ExpertParallelMLP`` refuses a float ``max_recv_rows`` when built."""
    from ditron.nn import moe as nn_moe

    me, dev = ditron.world().rank, ditron.world().device
    x, ids = torch.randn(3, 8, device=dev), torch.zeros(3, 1, dtype=torch.int64, device=dev)
    seen = []
    for kw in ({"num_experts": 2.0 if me == 0 else 2},
               {"num_experts": 2, "max_tokens": 3.0 if me == 0 else 3}):
        name = list(kw)[-1]  # a float on rank 0
        with pytest.raises(ValueError, match=f"moe_dispatch: {name} must be an int, got "):
            nn_moe.moe_dispatch(x, ids, **kw)
        seen.append(name)
    layer = ditron.nn.ExpertParallelMLP(8, 4, 2)
    with pytest.raises(ValueError, match="max_tokens must be an int, got 3.0"):
        layer(x, ids, torch.ones(3, 1, device=dev), max_tokens=3.0)
    with pytest.raises(ValueError, match="ExpertParallelMLP: max_recv_rows must be an int"):
        ditron.nn.ExpertParallelMLP(8, 4, 2, max_recv_rows=4.0)
    assert layer(x, ids, torch.ones(3, 1, device=dev), max_tokens=3).shape == x.shape
    return seen


def test_non_int_sizes_raise_on_every_rank(monkeypatch, backend):
    monkeypatch.setenv("DITRON_LAUNCH_TIMEOUT", "60")
    assert ditron.launch(check_non_int_sizes, 2, backend=backend) == \
        [["num_experts", "max_tokens"]] * 2


def check_compile(compiler: str = "aot_eager", opcheck: bool = True) -> list[str]:
    """``ExpertParallelMLP`` (gated experts), and the same layer written with
    ``ditron.nn.moe``'s functions, eagerly and under ``torch.compile(fullgraph=True)`` (one
    graph, the ops opaque), equal the eager layer, value and gradients, on two routings of
    the same shapes; the custom ops pass ``torch.library.opcheck``."""
    from ditron.nn import moe as nn_moe

    rt = current()
    w, me, dev = rt.world.world_size, rt.world.rank, rt.world.device
    k, hidden, ffn, experts = 2, 12, 8, 2 * w
    torch.manual_seed(3)
    layer = ditron.nn.ExpertParallelMLP(hidden, ffn, experts, max_recv_rows=4 * w * k,
                                        activation=torch.nn.functional.silu, gated=True)

    def loss(x, ids, wts):
        return layer(x, ids, wts, max_tokens=6).square().sum()

    def functional_loss(x, ids, wts):  # the same layer from ditron.nn.moe's functions
        d = nn_moe.moe_dispatch(x, ids, experts, max_tokens=6, max_recv_rows=4 * w * k)
        gate, up = nn_moe.grouped_gemm(d.x, layer.w1, d.expert_offsets).chunk(2, dim=1)
        h = torch.nn.functional.silu(gate) * up
        y = nn_moe.grouped_gemm(h, layer.w2, d.expert_offsets)
        return nn_moe.moe_combine(y, d, wts).square().sum()

    compiled = torch.compile(loss, backend=compiler, fullgraph=True)
    functional = torch.compile(functional_loss, backend=compiler, fullgraph=True)
    for call in range(2):
        g = torch.Generator().manual_seed(10 * call + me)
        x = torch.randn(5 + me % 2, hidden, generator=g).to(dev).requires_grad_()
        ids = torch.randint(-1, experts, (x.shape[0], k), generator=g).to(dev)
        wts = torch.rand(x.shape[0], k, generator=g).to(dev).requires_grad_()
        leaves = [x, wts, layer.w1, layer.w2]
        grads = []
        # a new routing of the same shapes runs the compiled graphs again, no recompilation
        stance = torch.compiler.set_stance("fail_on_recompile") if call else nullcontext()
        with stance:
            # compiled first: the first trace of a call meets no agreed signature (its
            # agreement gathered inside the trace, which dynamo refused)
            for fn in (compiled, loss, functional, functional_loss):
                for t in leaves:
                    t.grad = None
                value = fn(x, ids, wts)
                value.backward()
                grads.append([value.detach(), *(t.grad.clone() for t in leaves)])
        grads = [grads[1], grads[0], grads[3], grads[2]]  # eager first
        for how, found in zip(("compiled", "functional", "functional compiled"), grads[1:],
                              strict=True):
            for i, (got, want) in enumerate(zip(found, grads[0], strict=True)):
                torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5,
                                           msg=f"rank {me} call {call}: {how} value/grad {i}")
    if not opcheck:
        return []
    from ditron.nn import library

    # opcheck compares outputs of several calls: a routing that fills the capacity exactly
    # (no undefined rows): each token's copy j goes to rank j, so each rank receives 4 * w
    x = torch.randn(4, hidden, device=dev)
    ids = (torch.arange(w) * 2 + torch.arange(4)[:, None] % 2).to(dev)
    grouped, *routing = torch.ops.ditron.moe_dispatch(x, ids, experts, 4, 4 * w)
    sizes = [experts, 4, w, 4, 4 * w]
    offsets = torch.tensor([0, 3, 8], device=dev)
    xs, ws = torch.randn(8, hidden, device=dev), torch.randn(2, hidden, ffn, device=dev)
    cases = [("moe_dispatch", (x, ids, experts, 4, 4 * w)),
             ("moe_send_copies", (torch.randn(4 * w, 3, device=dev), routing, sizes)),
             ("moe_return_copies", (torch.randn(*grouped.shape, device=dev), routing, sizes)),
             ("moe_combine", (torch.randn(*grouped.shape, device=dev),
                              torch.rand(4, w, device=dev), routing, sizes)),
             ("moe_combine", (torch.randn(*grouped.shape, device=dev), None, routing, sizes)),
             ("moe_send_tokens", (torch.randn(4, 3, device=dev), torch.rand(4, w, device=dev),
                                  routing, sizes)),
             ("moe_send_tokens", (torch.randn(4, 3, device=dev), None, routing, sizes)),
             ("moe_copy_dots", (torch.randn(*grouped.shape, device=dev),
                                torch.randn(4, hidden, device=dev), routing, sizes)),
             ("grouped_gemm", (xs, ws, offsets)),
             ("grouped_gemm_wgrad", (xs, torch.randn(8, ffn, device=dev), offsets))]
    done = []
    for name, args in cases:
        report = torch.library.opcheck(getattr(torch.ops.ditron, name).default, args)
        assert set(report.values()) == {"SUCCESS"}, (name, report)
        done.append(name)
    assert library.SIZES == ("num_experts", "num_tokens", "topk", "max_tokens", "capacity")
    return done


def test_compile_and_opcheck(backend):
    res = ditron.launch(check_compile, 2, backend=backend)
    assert res[0] == res[1] and len(res[0]) == 10


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_inductor_compiles_the_layer_gpu():
    # torch.compile's default backend (Triton kernels around the opaque ops), 2 ranks
    assert ditron.launch(check_compile, 2, "inductor", False, backend="cuda") == [[], []]
