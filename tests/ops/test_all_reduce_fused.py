"""The fused all-reduce (``engine="sm"``): one kernel, epochs on the device.

Against a torch.distributed reference (gloo, fp32 sums of the gathered inputs) on fresh
random data: sizes that do not divide into blocks, slices or ranks, several sizes sharing one
workspace, inputs larger than one launch, repeated calls, and identical launches replayed on
the same buffers (what a CUDA graph replay does) with new input values each time.
"""

from __future__ import annotations

import pytest
import torch
import torch.distributed as dist

import ditron
from ditron.kernels import all_reduce as kar
from ditron.ops import collectives
from ditron.runtime.world import current

DTYPES = (torch.float32, torch.bfloat16, torch.float16)


def _reference(x: torch.Tensor) -> torch.Tensor:
    parts = [torch.empty(x.shape) for _ in range(dist.get_world_size())]
    dist.all_gather(parts, x.float().cpu(), group=current().host_group)
    return torch.stack(parts).sum(0).to(x.dtype)


def _same_on_every_rank(y: torch.Tensor) -> bool:
    parts = [torch.empty(y.shape) for _ in range(dist.get_world_size())]
    dist.all_gather(parts, y.float().cpu(), group=current().host_group)
    return all(torch.equal(p, parts[0]) for p in parts)


def _check(got: torch.Tensor, x: torch.Tensor, what: str) -> None:
    ref = _reference(x)
    assert got.shape == x.shape and got.dtype == x.dtype, what
    assert not torch.isnan(got.float()).any(), f"{what}: unwritten elements"
    tol = 1e-5 if x.dtype == torch.float32 else 1e-2
    torch.testing.assert_close(got.cpu(), ref, rtol=tol, atol=tol, msg=what)
    assert _same_on_every_rank(got), f"{what}: ranks got different bits"


def _rank_sizes_and_repeats() -> int:
    me = ditron.world().rank
    dev = ditron.world().device
    checks = 0
    # 1000/1023/1500 share the 2048-element workspace with different slicings
    sizes = [1, 5, 1000, 1023, 1500, 4099]
    for it in range(2):
        for i, n in enumerate(sizes):
            dtype = DTYPES[(i + it) % 3]
            g = torch.Generator().manual_seed(1000 * me + 10 * i + it)
            x = torch.randn(n, generator=g).to(dtype).to(dev)
            for method in ("one_shot", "two_shot"):
                got = ditron.ops.all_reduce(x, method, engine="sm")
                _check(got, x, f"n={n} {dtype} {method} call {it}")
                checks += 1
    # a 2-D input and one larger than a launch (pieces of FUSED_MAX_ELEMENTS)
    collectives.FUSED_MAX_ELEMENTS = 2048
    try:
        g = torch.Generator().manual_seed(77 + me)
        x = torch.randn(9, 700, generator=g).to(dev)
        for method in ("one_shot", "two_shot"):
            _check(ditron.ops.all_reduce(x, method, engine="sm"), x, f"pieces {method}")
            checks += 1
    finally:
        collectives.FUSED_MAX_ELEMENTS = 1 << 24
    return checks


def _rank_replay() -> int:
    """The same launch (same tensors, same arguments) four times with new input values."""
    me = ditron.world().rank
    dev = ditron.world().device
    checks = 0
    for two_shot in (False, True):
        x = torch.empty(3001, dtype=torch.bfloat16, device=dev)
        out = torch.empty_like(x)
        ws = collectives._fused_workspace(x.dtype, two_shot, x.numel())
        ctx = current().context()
        for it in range(4):
            g = torch.Generator().manual_seed(100 * me + it)
            x.copy_(torch.randn(x.numel(), generator=g).to(x.dtype))
            out.fill_(float("nan"))
            kar.launch(x, out, ws, two_shot, ctx, block=1024, num_warps=1)
            _check(out, x, f"replay {it} two_shot={two_shot}")
            checks += 1
    return checks


@pytest.mark.parametrize("world_size", [2, 3, 4])
def test_fused_all_reduce_matches_torch(world_size):
    assert ditron.launch(_rank_sizes_and_repeats, world_size) == [26] * world_size


@pytest.mark.parametrize("world_size", [2, 3])
def test_fused_all_reduce_survives_replayed_launches(world_size):
    assert ditron.launch(_rank_replay, world_size) == [8] * world_size


def _one_rank() -> bool:
    x = torch.randn(17, device=ditron.world().device)
    y = ditron.ops.all_reduce(x, engine="sm")
    return torch.equal(y, x) and y.data_ptr() != x.data_ptr()


def test_fused_all_reduce_world_of_one():
    assert ditron.launch(_one_rank, 1) == [True]


def _rank_graph() -> int:
    """CUDA graph: capture one all-reduce, replay it with new inputs (GPU only)."""
    me = ditron.world().rank
    checks = 0
    for method, engine in (("one_shot", "sm"), ("two_shot", "sm"), ("auto", None)):
        x = torch.empty(5000, dtype=torch.bfloat16, device="cuda")
        x.normal_()
        ditron.ops.all_reduce(x, method, engine="sm")  # warm-up: workspace, compile
        torch.cuda.synchronize()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):  # "auto" while capturing takes the graph-safe path
            y = ditron.ops.all_reduce(x, method, engine=engine)
        for it in range(5):
            g = torch.Generator().manual_seed(10 * me + it)
            x.copy_(torch.randn(x.numel(), generator=g).to(x.dtype))
            y.fill_(float("nan"))
            graph.replay()
            torch.cuda.synchronize()
            _check(y, x, f"graph replay {it} {method}")
            checks += 1
    # ops that keep per-call state on the host refuse capture instead of replaying stale state
    x = torch.randn(64, device="cuda")
    ditron.ops.all_gather(x)
    torch.cuda.synchronize()
    with pytest.raises(RuntimeError, match="cannot be captured in a CUDA graph"):
        with torch.cuda.graph(torch.cuda.CUDAGraph()):
            ditron.ops.all_gather(x)
    return checks + 1


@pytest.mark.gpu
def test_fused_all_reduce_in_cuda_graph():
    assert ditron.launch(_rank_graph, 2, backend="cuda") == [16, 16]
