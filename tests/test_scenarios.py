"""Whole steps as a user writes them, combining the public API across layers, against torch.

- A training step of a transformer-like block: a tensor-parallel MLP (``ditron.nn``
  column then row layer, sequence-parallel and not) whose output feeds a replicated
  router and an ``ExpertParallelMLP``; the router's gradient summed over ranks with
  ``ditron.ops.all_reduce``; SGD with momentum for several steps on fresh inputs, eagerly
  and under ``torch.compile``; outputs and every updated parameter against a float64
  torch model of all ranks' tokens that one process trains the same way.
- One loop that interleaves, call after call, the collectives with rotating engines, the
  overlapped TP GEMMs, a compiled megakernel TP MLP, the MoE ops (routing that changes
  every iteration), send / recv, symmetric buffers allocated and freed, and
  ``release_workspaces``: every result against torch on the same inputs.

Each op's own tests cover it alone; these cover the state they share in one process (the
heap, workspaces, signal pads and epochs, agreed signatures, compiled graphs).
"""

from __future__ import annotations

import torch

import ditron

from .ops.poison import poison_empty


def _close(name: str, got: torch.Tensor, ref: torch.Tensor, tol: float = 1e-4) -> None:
    assert got.shape == ref.shape, f"{name}: shape {tuple(got.shape)} != {tuple(ref.shape)}"
    got, ref = got.detach().double().cpu(), ref.detach().double().cpu()
    assert torch.isfinite(got).all(), f"{name}: unwritten (NaN) or non-finite elements"
    if got.numel():
        err = (got - ref).abs().max().item()
        scale = max(ref.abs().max().item(), 1e-6)
        assert err <= tol * scale, f"{name}: max error {err} vs scale {scale}"


def _moe_reference(x, router, w1, w2, k: int):
    """The MoE layer on ``x`` (float64): each token's top-k experts, weighted by the
    router's softmax."""
    weights, ids = router(x).softmax(-1).topk(k)
    out = torch.zeros_like(x)
    for j in range(k):
        for t in range(x.shape[0]):
            e = int(ids[t, j])
            y = torch.nn.functional.gelu(x[t] @ w1[e]) @ w2[e]
            out = out.index_add(0, torch.tensor([t]), (weights[t, j] * y)[None])
    return out


def _training_case(steps: int, runs) -> int:
    """``runs``: (sequence_parallel, compiled). Non-sequence-parallel ranks hold the same
    tokens: the TP layers get one copy's gradient, while the experts (which receive every
    rank's copies) and the all-reduced router get ``W`` copies'."""
    from ditron import nn

    poison_empty()
    w = ditron.world()
    W, r, dev = w.world_size, w.rank, w.device
    h, E, fe, k, s, b = 10, 2 * W, 7, 2, 3, 2
    f = 6 * W
    checks = 0
    for sp, compiled in runs:
        torch.manual_seed(0)  # the same model on every rank
        f64 = {"dtype": torch.float64}
        fc1, fc2 = torch.nn.Linear(h, f, **f64), torch.nn.Linear(f, h, **f64)
        router_ref = torch.nn.Linear(h, E, bias=False, **f64)
        w1 = torch.nn.Parameter(torch.randn(E, h, fe, **f64) / h ** 0.5)
        w2 = torch.nn.Parameter(torch.randn(E, fe, h, **f64) / fe ** 0.5)
        ref_params = [*fc1.parameters(), *fc2.parameters(), router_ref.weight, w1, w2]
        kw = {"sequence_parallel": sp, "dtype": torch.float32, "device": dev}
        col = nn.ColumnParallelLinear.from_linear(fc1, **kw)
        row = nn.RowParallelLinear.from_linear(fc2, **kw)
        router = torch.nn.Linear(h, E, bias=False, device=dev)
        moe = nn.ExpertParallelMLP(h, fe, E, dtype=torch.float32, device=dev)
        mine = slice(r * (E // W), (r + 1) * (E // W))
        with torch.no_grad():
            router.weight.copy_(router_ref.weight)
            moe.w1.copy_(w1[mine])
            moe.w2.copy_(w2[mine])
        params = [*col.parameters(), *row.parameters(), router.weight, moe.w1, moe.w2]
        opt = torch.optim.SGD(params, lr=1e-2, momentum=0.9)
        ref_opt = torch.optim.SGD(ref_params, lr=1e-2, momentum=0.9)

        def block(x, col=col, row=row, router=router, moe=moe):
            y = x + row(torch.nn.functional.gelu(col(x)))
            tokens = y.reshape(-1, h)
            weights, ids = router(tokens).softmax(-1).topk(k)
            return y + moe(tokens, ids, weights).reshape(y.shape)

        run = torch.compile(block, backend="aot_eager", fullgraph=True) if compiled else block
        for step in range(steps):
            torch.manual_seed(100 + step)  # fresh inputs, the same on every rank
            X = torch.randn(W * s, b, h, **f64)  # the sequence; ranks hold slices if sp
            ref_opt.zero_grad()
            y = X + fc2(torch.nn.functional.gelu(fc1(X)))
            parts = [y[q * s:(q + 1) * s] for q in range(W)] if sp else [y]
            outs = [p + _moe_reference(p.reshape(-1, h), router_ref, w1, w2, k).reshape(p.shape)
                    for p in parts]
            sum(o.square().sum() for o in outs).backward()
            if not sp:
                for p in (w1, w2, router_ref.weight):
                    p.grad *= W
            ref_opt.step()

            opt.zero_grad()
            rows = slice(r * s, (r + 1) * s) if sp else slice(None)
            out = run(X[rows].float().to(dev))
            out.double().square().sum().backward()
            router.weight.grad = ditron.ops.all_reduce(router.weight.grad)
            opt.step()
            tag = f"sp={sp} compiled={compiled} step {step}"
            _close(f"{tag} output", out, outs[r if sp else 0])
            shard = slice(r * (f // W), (r + 1) * (f // W))
            for name, got, want in [("fc1 weight", col.weight, fc1.weight[shard]),
                                    ("fc1 bias", col.bias, fc1.bias[shard]),
                                    ("fc2 weight", row.weight, fc2.weight[:, shard]),
                                    ("fc2 bias", row.bias, fc2.bias),
                                    ("router", router.weight, router_ref.weight),
                                    ("w1", moe.w1, w1[mine]), ("w2", moe.w2, w2[mine])]:
                _close(f"{tag} {name}", got, want)
            checks += 1
    return checks


def test_tp_and_moe_training_steps_match_torch(backend):
    runs = [(True, False), (False, False), (True, True)]
    assert ditron.launch(_training_case, 2, 2, runs, backend=backend) == [6, 6]


def _mixed_loop_case(iterations: int, engines: list[str]) -> int:
    """Every rank builds every rank's inputs from one generator per iteration, so each
    reference is computed locally."""
    from ditron import ops
    from ditron import task as dt
    from ditron.task.tp_mlp import MlpBlocks, add_tp_mlp_stack

    poison_empty()
    w = ditron.world()
    W, r, dev = w.world_size, w.rank, w.device
    M, H, F = 11, 24, 10  # the megakernel MLP: no dimension divides into its tiles
    torch.manual_seed(7)
    full = [(torch.randn(H, F * W, dtype=torch.float64) / H ** 0.5,
             torch.randn(H, F * W, dtype=torch.float64) / H ** 0.5,
             torch.randn(F * W, H, dtype=torch.float64) / (F * W) ** 0.5) for _ in range(2)]
    cols = slice(r * F, (r + 1) * F)
    local = [(a[:, cols].float().to(dev), b[:, cols].float().to(dev), c[cols].float().to(dev))
             for a, b, c in full]
    graph = dt.TaskGraph("scenario_mlp")
    x_mlp = torch.empty(M, H, device=dev)
    stack = add_tp_mlp_stack(graph, x_mlp, local,
                             blocks=MlpBlocks(block_m=16, block_n=16, block_k=16, reduce_n=32))
    mk = graph.compile()
    E, k, hid, ffn = 2 * W, 2, 9, 5
    ew1, ew2 = torch.randn(E, hid, ffn), torch.randn(E, ffn, hid)
    experts = slice(2 * r, 2 * r + 2)
    held: list[torch.Tensor] = []
    checks = 0
    for it in range(iterations):
        g = torch.Generator().manual_seed(1000 + it)
        engine = engines[it % len(engines)]

        def rand(*shape, g=g):
            return torch.randn(*shape, generator=g)

        def dv(t):
            return t.to(dev)

        X = [rand(3 + it % 2, 5) for _ in range(W)]
        _close(f"{it} all_gather {engine}", ops.all_gather(dv(X[r]), engine=engine),
               torch.cat(X))
        P = [rand(2 * W, 3) for _ in range(W)]
        _close(f"{it} reduce_scatter {engine}", ops.reduce_scatter(dv(P[r]), engine=engine),
               sum(P)[2 * r:2 * r + 2])
        method = ("one_shot", "two_shot")[it % 2]
        _close(f"{it} all_reduce {method} {engine}",
               ops.all_reduce(dv(P[r]), method, engine=engine), sum(P))

        x = torch.randn(M, H, generator=g, dtype=torch.float64)
        x_mlp.copy_(x)
        mk()
        for a, b, c in full:
            x = (torch.nn.functional.silu(x @ a) * (x @ b)) @ c + x
        _close(f"{it} megakernel", stack.out, x)

        A, B = [rand(5, 7) for _ in range(W)], rand(7, 6)
        _close(f"{it} ag_gemm", ops.ag_gemm(dv(A[r]), dv(B)), torch.cat(A) @ B)
        A2, B2 = [rand(3 * W, 4) for _ in range(W)], [rand(4, 5) for _ in range(W)]
        whole = sum(a @ b for a, b in zip(A2, B2, strict=True))
        _close(f"{it} gemm_rs", ops.gemm_rs(dv(A2[r]), dv(B2[r])), whole[3 * r:3 * r + 3])
        _close(f"{it} gemm_ar", ops.gemm_ar(dv(A2[r]), dv(B2[r])), whole)

        splits = [[(q + d + it) % 3 for d in range(W)] for q in range(W)]  # zeros too
        T = [rand(sum(splits[q]), 4) for q in range(W)]
        want = torch.cat([T[q][sum(splits[q][:r]):sum(splits[q][:r + 1])] for q in range(W)])
        got = ops.all_to_all(dv(T[r]), splits[r], [splits[q][r] for q in range(W)],
                             engine=engine)
        _close(f"{it} all_to_all {engine}", got, want)

        tokens = [3 + (q + it) % 3 for q in range(W)]  # changes every iteration
        xs = [rand(t, hid) for t in tokens]
        ids = [torch.randint(-1, E, (t, k), generator=g) for t in tokens]
        wts = [torch.rand(t, k, generator=g) for t in tokens]
        d = ops.moe_dispatch(dv(xs[r]), dv(ids[r]), num_experts=E, max_tokens=max(tokens))
        hidden = torch.relu(ops.grouped_gemm(d.x, dv(ew1[experts]), d.expert_offsets))
        y = ops.grouped_gemm(hidden, dv(ew2[experts]), d.expert_offsets)
        ref = torch.zeros(tokens[r], hid)
        for t in range(tokens[r]):
            for j in range(k):
                e = int(ids[r][t, j])
                if e >= 0:
                    ref[t] += wts[r][t, j] * (torch.relu(xs[r][t] @ ew1[e]) @ ew2[e])
        _close(f"{it} moe", ops.moe_combine(y, d, dv(wts[r])), ref)

        v = [rand(6) for _ in range(W)]
        if W > 1:
            nxt, prv = (r + 1) % W, (r - 1) % W
            if r % 2 == 0:
                ops.send(dv(v[r]), nxt)
                got = ops.recv((6,), prv, dtype=torch.float32)
            else:
                got = ops.recv((6,), prv, dtype=torch.float32)
                ops.send(dv(v[r]), nxt)
            _close(f"{it} send/recv", got, v[prv])

        buf = ditron.zeros((7 + it,), torch.float32)  # moves the heap's free blocks
        buf.fill_(r + it)
        ditron.barrier()
        _close(f"{it} peer", ditron.peer(buf, (r + 1) % W),
               torch.full((7 + it,), float((r + 1) % W + it)))
        ditron.barrier()
        held.append(buf)
        if len(held) > 2:
            ditron.free(held.pop(0))
        if it % 2:
            ops.release_workspaces()
        checks += 1
    mk.free()
    return checks


def test_ops_megakernel_and_moe_in_one_loop(backend):
    engines = ["copy_engine", "sm", "network"]
    assert ditron.launch(_mixed_loop_case, 3, 4, engines, backend=backend) == [4] * 3
