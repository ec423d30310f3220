"""ditron.nn at its edges: torch.autocast's rule for float64 operands, layers recomputed by
activation checkpointing while another world is current, what the layers' reprs show, and
the replicated-input column layer's refusal of a wrong input."""

from __future__ import annotations

import pytest
import torch
import torch.utils.checkpoint as cp

import ditron

from ..ops.poison import poison_empty


def _float64_under_autocast_case() -> int:
    """torch.autocast casts float32 and float16 operands to its dtype but leaves float64
    ones as they are (torch's ``is_eligible``); the functions used to cast float64 to bf16
    too, computing silently in bf16 what torch computes in float64. Ditron's GEMMs take no
    float64, so such operands are now refused, before any kernel, as without autocast."""
    from ditron import nn
    from ditron.nn import functional as F

    poison_empty()
    w = ditron.world()
    W, dev = w.world_size, w.device
    torch.manual_seed(11)  # the same operands on every rank
    f64 = {"dtype": torch.float64, "device": dev}
    x64, w64 = torch.randn(3, 8, **f64), torch.randn(4, 8, **f64)
    rows64 = torch.randn(2 * W, 8, **f64)
    experts = nn.ExpertParallelMLP(8, 4, W, dtype=torch.float64)
    ids = torch.randint(0, W, (3, 1), device=dev)
    x32, w32, b32 = x64.float(), w64.float(), torch.randn(4, device=dev)
    checks = 0
    with torch.autocast(dev.type, dtype=torch.bfloat16):
        assert torch.nn.functional.linear(x64, w64).dtype == torch.float64  # torch's rule
        cases = {
            "all_gather_linear": lambda: F.all_gather_linear(x64, w64),
            "linear_reduce_scatter": lambda: F.linear_reduce_scatter(rows64, w64),
            "linear_all_reduce": lambda: F.linear_all_reduce(x64, w64),
            # torch refuses it too ("must have the same dtype"); it was cast to bf16
            "bias": lambda: F.linear_all_reduce(x32, w32, b32.double()),
            "experts": lambda: experts(x64, ids, torch.ones(3, 1, **f64)),
        }
        words = {"bias": r"bias \(torch.float64", "experts": "compute in torch.float64"}
        for name, fn in cases.items():
            with pytest.raises(ValueError, match=words.get(name, "got torch.float64")):
                fn()
                pytest.fail(f"{name}: no error (computed in {torch.get_autocast_dtype(dev.type)})")
            checks += 1
        # float16 and float32 operands are still cast, as torch casts them
        y = F.linear_all_reduce(x32.half(), w32, b32)
    assert y.dtype == torch.bfloat16, y.dtype
    bf = [t.bfloat16().double() for t in (x32.half(), w32, b32)]
    torch.testing.assert_close(y.double(), W * (bf[0] @ bf[1].T) + bf[2], rtol=3e-2, atol=3e-2)
    return checks + 1


def test_float64_is_not_cast_under_autocast(backend):
    assert ditron.launch(_float64_under_autocast_case, 2, backend=backend) == [6, 6]


def _checkpoint_case() -> int:
    """A block of every layer (sequence-parallel and replicated TP pairs, experts) built in
    the job's world, checkpointed (reentrant and not); its backward pass, which recomputes
    the forward, runs while another world is current (a world of this process alone, as a
    TP world beside an EP world). The layers raised RuntimeError (another world current);
    now they run in their own world, with the gradients of a run without checkpointing."""
    from ditron import nn

    poison_empty()
    job = ditron.world()
    W, me, dev = job.world_size, job.rank, job.device
    torch.manual_seed(5)  # the same reference layers and draws on every rank
    col, row = nn.ColumnParallelLinear(8, 4 * W), nn.RowParallelLinear(4 * W, 8)
    col_r = nn.ColumnParallelLinear(8, 2 * W, sequence_parallel=False)
    row_r = nn.RowParallelLinear(2 * W, 8, sequence_parallel=False)
    experts = nn.ExpertParallelMLP(8, 6, 2 * W)
    gelu = torch.nn.functional.gelu

    def block(x: torch.Tensor, ids: torch.Tensor, wts: torch.Tensor) -> torch.Tensor:
        h = row(gelu(col(x)))
        return experts(row_r(gelu(col_r(h))), ids, wts)

    other = ditron.init(group=[job.global_ranks[me]])  # current from here on
    assert ditron.world() == other != job
    g = torch.Generator().manual_seed(20 + me)  # this rank's tokens
    x = torch.randn(3, 8, generator=g).to(dev).requires_grad_()
    ids = torch.randint(0, 2 * W, (3, 2), generator=g).to(dev)
    wts = torch.rand(3, 2, generator=g).to(dev).requires_grad_()
    gy = torch.randn(3, 8, generator=g).to(dev)
    leaves = [x, wts, *col.parameters(), *row.parameters(), *col_r.parameters(),
              *row_r.parameters(), *experts.parameters()]

    def grads(run, *args) -> list[torch.Tensor]:
        for t in leaves:
            t.grad = None
        run(*args)
        return [t.grad.clone() for t in leaves]

    def plain() -> None:
        with ditron.use(job):
            (block(x, ids, wts) * gy).sum().backward()

    def checkpointed(reentrant: bool, forward_world) -> None:
        with ditron.use(forward_world):
            out = cp.checkpoint(block, x, ids, wts, use_reentrant=reentrant)
        (out * gy).sum().backward()  # in the other world: recomputes block

    ref = grads(plain)
    checks = 0
    for reentrant in (True, False):
        for forward_world in (job, other):
            got = grads(checkpointed, reentrant, forward_world)
            assert ditron.world() == other
            for i, (a, b) in enumerate(zip(got, ref, strict=True)):
                torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6, msg=(
                    f"leaf {i}, reentrant={reentrant}, forward in {forward_world.global_ranks}"))
            checks += 1
    return checks


def test_checkpointed_layers_recompute_in_their_world(backend):
    assert ditron.launch(_checkpoint_case, 2, backend=backend) == [4, 4]


def _reprs_case() -> list[str]:
    from ditron import nn

    return [repr(m) for m in (
        nn.ColumnParallelLinear(6, 4, keep_gathered=False, method="fallback"),
        nn.ColumnParallelLinear(6, 4, sequence_parallel=False),
        nn.RowParallelLinear(4, 6, bias=False, method="overlap"),
        nn.ExpertParallelMLP(4, 8, 2, max_recv_rows=7),
        nn.ExpertParallelMLP(4, 8, 2, gated=True, activation=torch.nn.SiLU()))]


def test_reprs_show_the_settings(backend):
    col, col_r, row, moe, moe_module = ditron.launch(_reprs_case, 2, backend=backend)[1]
    assert col == ("ColumnParallelLinear(in_features=6, out_features=4, bias=True, "
                   "sequence_parallel=True, keep_gathered=False, method='fallback', "
                   "shard=(2, 6), world=[0, 1])"), col
    assert col_r == ("ColumnParallelLinear(in_features=6, out_features=4, bias=True, "
                     "sequence_parallel=False, method='auto', shard=(2, 6), world=[0, 1])"), col_r
    assert row == ("RowParallelLinear(in_features=4, out_features=6, bias=False, "
                   "sequence_parallel=True, method='overlap', shard=(6, 2), world=[0, 1])"), row
    assert moe == ("ExpertParallelMLP(hidden=4, ffn=8, num_experts=2, local_experts=1, "
                   "gated=False, activation=gelu, max_recv_rows=7, world=[0, 1])"), moe
    # a module activation is a child module, which torch's repr shows itself
    assert moe_module == ("ExpertParallelMLP(\n  hidden=4, ffn=8, num_experts=2, "
                          "local_experts=1, gated=True, world=[0, 1]\n  (activation): SiLU()\n"
                          ")"), moe_module


def _replicated_column_case() -> int:
    """The non-sequence-parallel column layer ran its wrong input into torch's matmul
    ("mat1 and mat2 shapes cannot be multiplied"); it names the layer and the shape it
    takes (before ``copy_to_tensor_parallel``'s agreement, whose peers it tells)."""
    from ditron import nn

    dev = ditron.world().device
    col = nn.ColumnParallelLinear(6, 4, sequence_parallel=False)
    for bad in (torch.randn(3, 5, device=dev), torch.tensor(1.0, device=dev)):
        with pytest.raises(ValueError, match=r"ColumnParallelLinear\(sequence_parallel=False\) "
                                             r"takes \[\.\.\., 6\]"):
            col(bad)
    torch.manual_seed(2)
    x = torch.randn(2, 3, 6, device=dev, requires_grad=True)  # still usable
    y = col(x)
    torch.testing.assert_close(y, torch.nn.functional.linear(x, col.weight, col.bias))
    y.sum().backward()
    assert torch.isfinite(x.grad).all()
    return 2


def test_replicated_column_refuses_wrong_features(backend):
    assert ditron.launch(_replicated_column_case, 2, backend=backend) == [2, 2]


def _one_rank_not_a_tensor_case() -> list[str]:
    """Rank 1 alone passes a list for an operand, or a wrong input to the replicated
    column layer: every rank raises ``ValueError`` naming rank 1 (a list raised
    ``AttributeError`` on rank 1 alone, its peer waiting in the function's agreement), and
    a good call works after."""
    from ditron import nn
    from ditron.nn import functional as F

    me, dev = ditron.world().rank, ditron.world().device
    bad = me == 1
    x, wt = torch.randn(4, 8, device=dev), torch.randn(6, 8, device=dev)
    col = nn.ColumnParallelLinear(8, 4, sequence_parallel=False)

    def odd(t: torch.Tensor) -> object:
        return t.tolist() if bad else t

    calls = [lambda: F.all_gather_linear(odd(x), wt), lambda: F.linear_reduce_scatter(x, odd(wt)),
             lambda: F.linear_all_reduce(x, wt, odd(torch.zeros(6, device=dev))),
             lambda: F.all_gather(odd(x)), lambda: F.reduce_scatter(odd(x)),
             lambda: F.copy_to_tensor_parallel(odd(x)),
             lambda: col(x[:, :5] if bad else x)]
    seen = []
    for call in calls:
        with pytest.raises(ValueError) as err:
            call()
        text = str(err.value)
        assert bad or "rank 1: ValueError" in text, text
        seen.append(text.split("must be a torch.Tensor, got ")[-1].split(" (")[0] if bad
                    else text.split(":")[0])
    y = F.all_gather_linear(x, wt)  # still in step
    torch.testing.assert_close(y[me * 4:(me + 1) * 4], x @ wt.T)
    return seen


def test_one_rank_passing_no_tensor_raises_on_every_rank(monkeypatch, backend):
    monkeypatch.setenv("DITRON_LAUNCH_TIMEOUT", "60")  # the old hang, short
    names = [f"ditron.nn.{n}" for n in ("all_gather_linear", "linear_reduce_scatter",
                                        "all_gather", "reduce_scatter",
                                        "copy_to_tensor_parallel", "copy_to_tensor_parallel")]
    names.insert(2, "ditron.ops.gemm_ar")  # a 2-D input's first agreement: the op's
    got = ditron.launch(_one_rank_not_a_tensor_case, 2, backend=backend)
    assert got[0] == names, got[0]
    assert got[1][:6] == ["list"] * 6 and "ColumnParallelLinear" in got[1][6], got[1]


def _world_gone_case() -> str:
    from ditron import nn

    me = ditron.world().rank
    ditron.init(group=[me])
    layer = nn.RowParallelLinear(4, 6, sequence_parallel=False)
    ditron.shutdown()
    ditron.init()  # the job again: the layer's world is gone
    with pytest.raises(RuntimeError, match=rf"built in the world over global ranks \[{me}\], "
                                           r"which this process no longer has"):
        layer(torch.randn(2, 4, device=ditron.world().device))
    return "raised"


def test_layer_of_a_world_shut_down_raises(backend):
    assert ditron.launch(_world_gone_case, 2, backend=backend) == ["raised"] * 2
