"""Ops called in a random interleaved order, each with new shapes, against torch.distributed:
the ops share the heap, workspaces and signal pads, so a call that leaves stale state for
another op (or for itself at another shape) fails here even when each op alone passes."""

from __future__ import annotations

import random

import pytest
import torch
import torch.distributed as dist

import ditron
from ditron import ops

from .poison import poison_empty

KINDS = ("ag_gemm", "gemm_rs", "gemm_ar", "all_gather", "reduce_scatter", "all_reduce",
         "all_to_all")


def _group():
    from ditron.runtime.world import current

    return current().host_group


def _summed(x: torch.Tensor) -> torch.Tensor:
    """The fp32 sum of ``x`` over ranks."""
    total = x.float().cpu()
    dist.all_reduce(total, group=_group())
    return total


def _gathered(x: torch.Tensor, dim: int) -> torch.Tensor:
    parts = [torch.empty_like(x.cpu()) for _ in range(ditron.world().world_size)]
    dist.all_gather(parts, x.cpu().contiguous(), group=_group())
    return torch.cat(parts, dim)


def _step(kind: str, rng: random.Random, g: torch.Generator, dtype: torch.dtype):
    """One call of ``kind`` on shapes drawn from ``rng`` (the same on every rank) and data
    drawn from ``g`` (this rank's): ``(what was called, result, reference)``."""
    W, me = ditron.world().world_size, ditron.world().rank
    dev = ditron.world().device
    m, k, n = rng.randint(0, 37), rng.randint(1, 70), rng.randint(1, 45)

    def rand(*shape):
        return torch.randn(*shape, generator=g).to(dtype).to(dev)

    def weight():  # the same [k, n] operand on every rank, half the time a transposed weight
        w = _gathered(rand(n, k), 0)[:n].to(dev)
        return w.t() if rng.random() < 0.5 else w.t().contiguous()

    what = f"{kind} {dtype} m={m} k={k} n={n}"
    if kind == "ag_gemm":
        a, b = rand(m, k), weight()
        return what, ops.ag_gemm(a, b), (_gathered(a, 0).float() @ b.float().cpu())
    if kind == "gemm_rs":
        a, b = rand(W * m, k), rand(k, n)
        return what, ops.gemm_rs(a, b), _summed(a.float() @ b.float())[me * m:(me + 1) * m]
    if kind == "gemm_ar":
        a, b = rand(m, k), rand(k, n)
        return what, ops.gemm_ar(a, b), _summed(a.float() @ b.float())
    if kind == "all_gather":
        x, dim = rand(m, n), rng.choice([0, 1, -1])
        return f"{what} dim={dim}", ops.all_gather(x, dim=dim), _gathered(x, dim).float()
    if kind == "reduce_scatter":
        x = rand(W * m, n)
        return what, ops.reduce_scatter(x), _summed(x)[me * m:(me + 1) * m]
    if kind == "all_reduce":
        x, method = rand(m, n), rng.choice(["auto", "one_shot", "two_shot"])
        return f"{what} {method}", ops.all_reduce(x, method=method), _summed(x)
    sizes = [[rng.randint(0, 5) for _ in range(W)] for _ in range(W)]  # [source][destination]
    ins, outs = sizes[me], [sizes[s][me] for s in range(W)]
    x = rand(sum(ins), n)
    ref = torch.empty(sum(outs), n, dtype=dtype)
    dist.all_to_all_single(ref, x.cpu(), outs, ins, group=_group())
    return f"{what} splits={sizes}", ops.all_to_all(x, ins, outs), ref.float()


def _sequence(seed: int, calls: int) -> list[str]:
    poison_empty()
    rng = random.Random(seed)  # the same draws on every rank: the calls match
    g = torch.Generator().manual_seed(seed * 1000 + ditron.world().rank)
    wrong = []
    for i in range(calls):
        kind = KINDS[i % len(KINDS)] if i < len(KINDS) else rng.choice(KINDS)
        dtype = rng.choice([torch.float32, torch.bfloat16])
        what, got, ref = _step(kind, rng, g, dtype)
        # bf16: the ops round each rank's partial before summing, the reference once
        tol = 1e-4 if dtype == torch.float32 else 2e-2
        scale = max(1.0, ref.abs().max().item()) if ref.numel() else 1.0
        if got.dtype != dtype or got.shape != ref.shape or not torch.allclose(
                got.float().cpu(), ref, rtol=tol, atol=tol * scale):
            err = (got.float().cpu() - ref).abs().max().item() \
                if got.shape == ref.shape and ref.numel() else None
            wrong.append(f"call {i}: {what}: got {tuple(got.shape)} {got.dtype}, "
                         f"want {tuple(ref.shape)} {dtype}, largest error {err}")
    return wrong


@pytest.mark.parametrize("world_size", [1, 2, 3, 4])
def test_interleaved_ops_match_torch(world_size, backend):
    calls = 28 if backend == "cpu" else 60
    assert ditron.launch(_sequence, world_size, world_size, calls, backend=backend) == \
        [[]] * world_size


#: engines taken call after call by one op: every pair of neighbours, and each engine two
#: calls apart from the other (an exchange's inbox half comes back every second call)
ENGINE_TURNS = ("copy_engine", "network", "network", "copy_engine", "sm", "network",
                "copy_engine", "copy_engine", "sm", "sm", "copy_engine")


def _engine_turns() -> list[str]:
    """Each collective called with the engines of ``ENGINE_TURNS`` in turn (one node)."""
    poison_empty()
    W, me = ditron.world().world_size, ditron.world().rank
    g = torch.Generator().manual_seed(100 + me)
    wrong = []
    for name in ("all_reduce one_shot", "all_reduce two_shot", "all_gather",
                 "reduce_scatter", "all_to_all"):
        for i, engine in enumerate(ENGINE_TURNS):
            x = torch.randn(2 * W, 3, generator=g).to(ditron.world().device)
            if name.startswith("all_reduce"):
                got = ops.all_reduce(x, method=name.split()[1], engine=engine)
                ref = _summed(x)
            elif name == "all_gather":
                got, ref = ops.all_gather(x, engine=engine), _gathered(x, 0)
            elif name == "reduce_scatter":
                got = ops.reduce_scatter(x, engine=engine)
                ref = _summed(x)[2 * me:2 * me + 2]
            else:
                got = ops.all_to_all(x, [2] * W, engine=engine)
                ref = torch.empty_like(x.cpu())
                dist.all_to_all_single(ref, x.cpu(), group=_group())
            if not torch.allclose(got.cpu(), ref, rtol=1e-5, atol=1e-5):
                wrong.append(f"{name} call {i} engine {engine}")
    return wrong


@pytest.mark.parametrize("world_size", [2, 3])
def test_engines_switched_between_calls(world_size, backend):
    """The network engine's calls acknowledge their inboxes to node peers too: a copy-engine
    call two calls after a network one waited for an acknowledgement nobody sent."""
    assert ditron.launch(_engine_turns, world_size, backend=backend) == [[]] * world_size
