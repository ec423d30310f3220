"""ditron.nn: tensor-parallel layers and differentiable collectives against a torch model
that one process computes whole (outputs and every gradient), on 1-4 ranks."""

from __future__ import annotations

import pytest
import torch

import ditron

from ..ops.poison import poison_empty

TOL = {torch.float32: 1e-5, torch.bfloat16: 3e-2}


def _close(name: str, got: torch.Tensor, ref: torch.Tensor) -> None:
    assert got.shape == ref.shape, f"{name}: shape {tuple(got.shape)} != {tuple(ref.shape)}"
    tol = TOL[got.dtype]
    got, ref = got.detach().double().cpu(), ref.detach().double().cpu()
    assert torch.isfinite(got).all(), f"{name}: unwritten (NaN) or non-finite elements"
    err = (got - ref).abs().max().item()
    scale = max(ref.abs().max().item(), 1e-6)
    assert err <= 4 * tol * scale, f"{name}: max error {err} vs scale {scale}"


def _mlp_case(m: int, hidden: int, per_rank_ffn: int, specs) -> int:
    """``specs``: (dtype, sequence_parallel, keep_gathered, method, calls). Each call: a
    two-layer MLP (column layer, GELU, row layer) on fresh inputs against ``torch.nn.Linear``
    layers that every rank builds alike and runs on the whole input; returns the checks."""
    from ditron import nn

    poison_empty()
    w = ditron.world()
    W, rank, dev = w.world_size, w.rank, w.device
    ffn = per_rank_ffn * W
    shard = slice(rank * per_rank_ffn, (rank + 1) * per_rank_ffn)
    checks = 0
    for dtype, sp, keep, method, calls in specs:
        torch.manual_seed(5)  # the same reference layers on every rank
        fc1 = torch.nn.Linear(hidden, ffn, dtype=torch.float64)
        fc2 = torch.nn.Linear(ffn, hidden, dtype=torch.float64)
        with torch.no_grad():
            fc2.bias.uniform_(-1, 1)  # a non-zero bias, so its gradient is not trivially right
        col = nn.ColumnParallelLinear.from_linear(fc1, sequence_parallel=sp, keep_gathered=keep,
                                                  method=method, dtype=dtype, device=dev)
        row = nn.RowParallelLinear.from_linear(fc2, sequence_parallel=sp, method=method,
                                               dtype=dtype, device=dev)
        for call in range(calls):
            torch.manual_seed(100 + call)  # fresh inputs per call, the same on every rank
            x = torch.randn(W * m, 2, hidden, dtype=torch.float64)
            g = torch.randn(W * m, 2, hidden, dtype=torch.float64)
            xr = x.clone().requires_grad_()
            y = fc2(torch.nn.functional.gelu(fc1(xr)))
            (y * g).sum().backward()
            rows = slice(rank * m, (rank + 1) * m) if sp else slice(None)
            xs = x[rows].to(dev, dtype).requires_grad_()
            ys = row(torch.nn.functional.gelu(col(xs)))
            (ys * g[rows].to(dev, dtype)).sum().backward()
            tag = f"{dtype} sp={sp} keep={keep} {method} call {call}"
            _close(f"output [{tag}]", ys, y[rows])
            _close(f"input grad [{tag}]", xs.grad, xr.grad[rows])
            _close(f"column weight grad [{tag}]", col.weight.grad, fc1.weight.grad[shard])
            _close(f"column bias grad [{tag}]", col.bias.grad, fc1.bias.grad[shard])
            _close(f"row weight grad [{tag}]", row.weight.grad, fc2.weight.grad[:, shard])
            _close(f"row bias grad [{tag}]", row.bias.grad, fc2.bias.grad)
            for p in (*fc1.parameters(), *fc2.parameters(), *col.parameters(),
                      *row.parameters()):
                p.grad = None
            checks += 6
    return checks


SPECS = [(torch.float32, True, True, "overlap", 2), (torch.float32, True, False, "overlap", 1),
         (torch.float32, False, True, "overlap", 1), (torch.bfloat16, True, True, "auto", 1)]
# "overlap" only on GPUs: with ranks sharing one GPU the host group is gloo, which the
# fallback's CUDA collectives do not run on
GPU_SPECS = [*SPECS[:3], (torch.bfloat16, True, True, "overlap", 1)]


@pytest.mark.parametrize("world_size", [1, 2, 3, 4])
def test_parallel_mlp_matches_torch(world_size, backend):
    # 7 rows per rank (not a multiple of the 16-row tile), hidden 20 (not a multiple of the
    # 16-wide K block), 6 ffn columns per rank; two calls on fresh inputs.
    specs = SPECS if backend == "cpu" else GPU_SPECS
    res = ditron.launch(_mlp_case, world_size, 7, 20, 6, specs, backend=backend)
    assert res == [6 * sum(s[-1] for s in specs)] * world_size


def _autocast_case() -> int:
    """fp32 layers and input under ``torch.autocast`` (bf16): bf16 outputs and fp32 gradients,
    both within bf16's tolerance of the float64 model, in both layer modes."""
    from ditron import nn

    poison_empty()
    w = ditron.world()
    W, rank, dev = w.world_size, w.rank, w.device
    checks = 0
    for sp in (True, False):
        torch.manual_seed(7)
        fc1 = torch.nn.Linear(16, 4 * W, dtype=torch.float64)
        fc2 = torch.nn.Linear(4 * W, 16, dtype=torch.float64)
        col = nn.ColumnParallelLinear.from_linear(fc1, sequence_parallel=sp, method="overlap",
                                                  dtype=torch.float32, device=dev)
        row = nn.RowParallelLinear.from_linear(fc2, sequence_parallel=sp, method="overlap",
                                               dtype=torch.float32, device=dev)
        x = torch.randn(9 * W, 16, dtype=torch.float64)
        xr = x.clone().requires_grad_()
        y = fc2(torch.nn.functional.gelu(fc1(xr)))
        y.square().sum().backward()
        rows = slice(rank * 9, rank * 9 + 9) if sp else slice(None)
        xs = x[rows].float().to(dev).requires_grad_()
        with torch.autocast(dev.type, dtype=torch.bfloat16):
            ys = row(torch.nn.functional.gelu(col(xs)))
        assert ys.dtype == torch.bfloat16, ys.dtype
        ys.float().square().sum().backward()
        assert xs.grad.dtype == col.weight.grad.dtype == row.bias.grad.dtype == torch.float32
        _close(f"autocast output sp={sp}", ys, y[rows])
        shard = slice(rank * 4, rank * 4 + 4)
        for name, got, ref in [("input", xs.grad, xr.grad[rows]),
                               ("column weight", col.weight.grad, fc1.weight.grad[shard]),
                               ("row weight", row.weight.grad, fc2.weight.grad[:, shard]),
                               ("row bias", row.bias.grad, fc2.bias.grad)]:
            _close(f"autocast {name} grad sp={sp}", got.bfloat16(), ref)
        checks += 5
    return checks


def test_autocast(backend):
    assert ditron.launch(_autocast_case, 2, backend=backend) == [10, 10]


def _collectives_case() -> int:
    """Forward and backward of the differentiable collectives, against the whole
    computation: every rank's loss term is ``(y_r * G_r).sum()`` with its own ``G_r``
    (the replicated output of ``all_reduce`` shares one ``G``)."""
    from ditron.nn import functional as F

    poison_empty()
    w = ditron.world()
    W, rank, dev = w.world_size, w.rank, w.device
    torch.manual_seed(3)
    xs = torch.randn(W, 2 * W, 3, dtype=torch.float64)  # every rank's input
    gs = torch.randn(W, 2 * W, 3, dtype=torch.float64)  # every rank's loss weights
    checks = 0
    for name in ("all_gather", "reduce_scatter", "all_reduce", "copy_to_tensor_parallel"):
        x = xs[rank].float().to(dev).requires_grad_()
        rows = slice(rank * 2, rank * 2 + 2)
        if name == "all_gather":
            y = F.all_gather(x[:2])
            ref_y, ref_gx = xs[:, :2].reshape(2 * W, 3), gs.sum(0)[:2 * W].reshape(W, 2, 3)
            ref_gx = torch.cat([ref_gx[rank], torch.zeros(2 * W - 2, 3, dtype=torch.float64)])
            g = gs[rank][:2 * W]
        elif name == "reduce_scatter":
            y = F.reduce_scatter(x)
            ref_y = xs.sum(0)[rows]
            ref_gx = torch.cat([gs[r][:2] for r in range(W)])
            g = gs[rank][:2]
        elif name == "all_reduce":
            y = F.all_reduce(x)
            ref_y, g = xs.sum(0), gs[0]
            ref_gx = gs[0]
        else:
            x_same = xs[0].float().to(dev).requires_grad_()  # a replicated input
            y = F.copy_to_tensor_parallel(x_same)
            ref_y, g, ref_gx, x = xs[0], gs[rank], gs.sum(0), x_same
        (y * g.to(dev, y.dtype)).sum().backward()
        _close(f"{name} forward", y, ref_y)
        _close(f"{name} input grad", x.grad, ref_gx)
        checks += 2
    return checks


def test_differentiable_collectives(backend):
    assert ditron.launch(_collectives_case, 3, backend=backend) == [8] * 3


def _compile_case(compiler: str = "aot_eager", opcheck: bool = True) -> list[str]:
    """Both MLPs (sequence-parallel and not) under ``torch.compile(backend=compiler)`` (one
    graph, the ops opaque) equal the eager runs, and the custom ops pass
    ``torch.library.opcheck``."""
    from ditron import nn

    w = ditron.world()
    dev = w.device
    for sp in (True, False):
        torch.manual_seed(1)
        col = nn.ColumnParallelLinear(20, 8 * w.world_size, sequence_parallel=sp,
                                      method="overlap")
        row = nn.RowParallelLinear(8 * w.world_size, 20, sequence_parallel=sp, method="overlap")
        with torch.no_grad():
            col.bias.uniform_(-1, 1)
            row.bias.uniform_(-1, 1)

        def loss(x, col=col, row=row):
            return row(torch.nn.functional.gelu(col(x))).square().sum()

        torch.manual_seed(2)  # the same input on every rank
        x = torch.randn(5, 3, 20, device=dev, requires_grad=True)
        params = [x, *col.parameters(), *row.parameters()]
        loss(x).backward()
        eager = [p.grad.clone() for p in params]
        for p in params:
            p.grad = None
        torch.compile(loss, backend=compiler, fullgraph=True)(x).backward()
        for i, (p, ref) in enumerate(zip(params, eager, strict=True)):
            _close(f"compiled grad {i} (sequence_parallel={sp})", p.grad, ref)

    a, b = torch.randn(6, 8, device=dev), torch.randn(5, 8, device=dev).t()
    results = []
    if not opcheck:
        return results
    for name, args in [("ag_gemm", (a, b, "overlap")), ("ag_gemm_gathered", (a, b, "overlap")),
                       ("gemm_rs", (a, b, "overlap")), ("gemm_ar", (a, b, "overlap")),
                       ("all_gather", (a,)), ("reduce_scatter", (a,)), ("all_reduce", (a,)),
                       # a transposed input: the fake's strides are the op's (contiguous);
                       # the fake took the input's, and inductor failed on its result
                       ("all_reduce", (a.t(),))]:
        report = torch.library.opcheck(getattr(torch.ops.ditron, name).default, args)
        assert set(report.values()) == {"SUCCESS"}, (name, report)
        results.append(name)
    return results


def test_compile_and_opcheck(backend):
    res = ditron.launch(_compile_case, 2, backend=backend)
    assert res[0] == res[1] and len(res[0]) == 8


@pytest.mark.gpu
def test_inductor_compiles_the_mlp_gpu():
    # torch.compile's default backend (Triton kernels around the opaque ops), 2 ranks
    assert ditron.launch(_compile_case, 2, "inductor", False, backend="cuda") == [[], []]


def _bad_inputs_case() -> int:
    from ditron import nn
    from ditron.nn import functional as F

    col, row = nn.ColumnParallelLinear(6, 4), nn.RowParallelLinear(4, 6)
    cases = {  # what is called, and the words of its error
        "out_features": (lambda: nn.ColumnParallelLinear(6, 5),
                         "out_features = 5 does not split over 2 ranks"),
        "in_features": (lambda: nn.RowParallelLinear(5, 6),
                        "in_features = 5 does not split over 2 ranks"),
        "no features": (lambda: nn.ColumnParallelLinear(6, 0),
                        "out_features must be a positive int, got 0"),
        "fractional": (lambda: nn.RowParallelLinear(4.0, 6),
                       "in_features must be a positive int, got 4.0"),
        "negative": (lambda: nn.ColumnParallelLinear(-6, 4),
                     "in_features must be a positive int, got -6"),
        "method": (lambda: nn.RowParallelLinear(4, 6, method="fused"),
                   r"method must be one of \('auto', 'overlap', 'fallback'\), got 'fused'"),
        "features": (lambda: col(torch.randn(3, 5)), "last dim must match the 6 input"),
        "dtype": (lambda: col(torch.randn(3, 6, dtype=torch.float64)),
                  "input dtype torch.float64 != weight dtype"),
        "one dim": (lambda: col(torch.randn(6)), "at least 2 dims"),
        "device": (lambda: col(torch.randn(3, 6, device="meta")), "input on meta, weight on"),
        "rows": (lambda: row(torch.randn(3, 2)), "dim 0 of"),
        "bias": (lambda: F.linear_all_reduce(torch.randn(3, 2), row.weight, torch.zeros(5)),
                 "bias"),
        "scatter rows": (lambda: F.reduce_scatter(torch.randn(3, 2)), "dim 0 of"),
        # a bias of another dtype or device was taken (the output silently promoted)
        "bias dtype": (lambda: F.all_gather_linear(torch.randn(3, 6), col.weight,
                                                   torch.zeros(2, dtype=torch.float64)),
                       r"bias \(torch.float64 on cpu\) must have the weight's dtype"),
        "bias device": (lambda: F.linear_reduce_scatter(torch.randn(4, 2), row.weight,
                                                        torch.zeros(6, device="meta")),
                        "bias .* on meta"),
    }
    for name, (fn, words) in cases.items():
        with pytest.raises(ValueError, match=words):
            fn()
            pytest.fail(f"{name}: no error")
    x = torch.randn(4, 6, device=ditron.world().device, requires_grad=True)  # still usable
    row(col(x)).sum().backward()
    assert x.grad is not None and torch.isfinite(x.grad).all()
    return len(cases)


def test_bad_inputs_raise_before_any_kernel(backend):
    assert ditron.launch(_bad_inputs_case, 2, backend=backend) == [15, 15]


def _one_rank_refuses_case() -> list[str]:
    """Rank 0 alone passes a bad argument, to each function's first call: every rank raises
    (the peers used to wait for it in the op's agreement until the launch timed out)."""
    from ditron import nn
    from ditron.nn import functional as F

    rank = ditron.world().rank
    col, row = nn.ColumnParallelLinear(6, 4), nn.RowParallelLinear(4, 6)
    bad = rank == 0
    calls = [  # each the first call of its op, whose agreement the peers wait in
        lambda: row(torch.randn(3 if bad else 4, 2)),  # rows do not split (gemm_rs)
        lambda: col(torch.randn(3, 5 if bad else 6)),  # features (ag_gemm)
        lambda: F.linear_all_reduce(torch.randn(3, 2), row.weight,  # bias dtype (gemm_ar)
                                    row.bias.double() if bad else row.bias),
        lambda: F.reduce_scatter(torch.randn(3 if bad else 4, 2)),  # rows (reduce_scatter)
    ]
    seen = []
    for fn in calls:
        with pytest.raises(ValueError) as info:
            fn()
        seen.append(str(info.value).split(":")[0] if bad else
                    str(info.value).split("rank 0: ValueError: ")[1].split(":")[0])
    x = torch.randn(4, 6, device=ditron.world().device, requires_grad=True)  # still usable
    row(col(x)).sum().backward()
    assert x.grad is not None and torch.isfinite(x.grad).all()
    return seen


def test_one_rank_refusing_raises_on_every_rank(monkeypatch, backend):
    monkeypatch.setenv("DITRON_LAUNCH_TIMEOUT", "60")  # the old hang, short
    names = [f"ditron.nn.{f}" for f in ("linear_reduce_scatter", "all_gather_linear",
                                        "linear_all_reduce", "reduce_scatter")]
    assert ditron.launch(_one_rank_refuses_case, 2, backend=backend) == [names, names]


def _gradient_modes_case() -> int:
    """Second-order gradients raise in both layer modes (the replicated-gradient
    conventions hold for first-order ones: ``sequence_parallel=False`` returned wrong values
    silently); without a backward pass (``no_grad``, ``inference_mode``) the column layer
    keeps no gathered copy of its input, and the outputs are those of a grad-mode call."""
    from ditron import nn
    from ditron.nn import functional as F

    W, dev = ditron.world().world_size, ditron.world().device
    checks = 0
    for sp in (True, False):
        torch.manual_seed(4)
        col = nn.ColumnParallelLinear(6, 4 * W, sequence_parallel=sp)
        row = nn.RowParallelLinear(4 * W, 6, sequence_parallel=sp)
        x = torch.randn(2 * W, 6, device=dev, requires_grad=True)
        for layers in ((row,), (col, row)):
            inp = x[:, :4] if len(layers) == 1 else x
            y = inp
            for layer in layers:
                y = layer(y)
            gx, = torch.autograd.grad(y.square().sum(), x, create_graph=True)
            with pytest.raises(RuntimeError, match="differentiate twice"):
                gx.sum().backward()
            checks += 1

    calls = []
    real = F._ditron

    class Spy:  # records the custom ops the functions call
        def __getattr__(self, name):
            calls.append(name)
            return getattr(real, name)

    col = nn.ColumnParallelLinear(6, 4 * W)
    x = torch.randn(3, 6, device=dev)
    F._ditron = Spy()
    try:
        want = col(x)
        assert calls == ["ag_gemm_gathered"], calls  # kept for the weight's gradient
        for mode in (torch.no_grad, torch.inference_mode):
            calls.clear()
            with mode():
                got = col(x)
            assert calls == ["ag_gemm"], (mode, calls)
            _close(f"{mode.__name__} output", got, want)
            checks += 1
    finally:
        F._ditron = real
    return checks


def test_gradient_modes(backend):
    assert ditron.launch(_gradient_modes_case, 2, backend=backend) == [6, 6]


@pytest.mark.gpu
def test_parallel_mlp_two_ranks_gpu():
    # "overlap" only: with ranks sharing one GPU the host group is gloo, which the
    # fallback's CUDA collectives do not run on.
    specs = [(torch.bfloat16, True, True, "overlap", 2), (torch.float32, True, False, "overlap", 1),
             (torch.float32, False, True, "overlap", 1)]
    res = ditron.launch(_mlp_case, 2, 300, 256, 192, specs, backend="cuda")
    assert res == [6 * sum(s[-1] for s in specs)] * 2


def _reduce_overhead_case() -> int:
    """A training step under ``torch.compile(mode="reduce-overhead")`` (inductor's CUDA
    graphs): warmed up uncompiled inside ``graph_safe()`` (the ops' workspaces outside
    inductor's graph pool), then compiled there (recorded); replays on new inputs equal the
    uncompiled step."""
    from ditron import nn

    w = ditron.world()
    dev = w.device
    torch.manual_seed(1)
    kw = {"method": "overlap", "dtype": torch.bfloat16}
    col = nn.ColumnParallelLinear(256, 128 * w.world_size, **kw)
    row = nn.RowParallelLinear(128 * w.world_size, 256, **kw)
    params = [*col.parameters(), *row.parameters()]

    def step(x):
        y = row(torch.nn.functional.gelu(col(x)))
        y.float().square().sum().backward()
        return y

    def fresh():
        return torch.randn(96, 2, 256, device=dev, dtype=torch.bfloat16, requires_grad=True)

    compiled = torch.compile(step, mode="reduce-overhead")
    with ditron.ops.graph_safe():
        step(fresh())
        for _ in range(2):
            compiled(fresh())
    checks = 0
    for call in range(3):
        x = fresh()
        for p in params:
            p.grad = None
        got = compiled(x).clone()
        grads = [p.grad.clone() for p in params]
        for p in params:
            p.grad = None
        ref = step(x.detach().requires_grad_())
        _close(f"replay {call} output", got, ref)
        for i, (g, p) in enumerate(zip(grads, params, strict=True)):
            _close(f"replay {call} grad {i}", g, p.grad)
        checks += 1 + len(params)
    return checks


@pytest.mark.gpu
def test_reduce_overhead_training_step_gpu():
    assert ditron.launch(_reduce_overhead_case, 2, backend="cuda") == [15, 15]
