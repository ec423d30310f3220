"""Calls sharing state, issued from two CUDA streams of a rank, follow each other in issue
order (``runtime/stream_order.py``), as NCCL's calls on one communicator do.

Each rank issues call A on stream 1 and call B of the same op and shape on stream 2, with
nothing ordering the streams; rank 0's stream 1 first sleeps on the device, so unordered,
its B would run before its A while rank 1 runs A first (B pairing with the peer's A, both
bumping one epoch). Both results are checked against torch references on fresh inputs,
outputs poisoned, three rounds (stale signals). GPU only: the CPU backend has no streams.
"""

from __future__ import annotations

import pytest
import torch
import torch.distributed as dist

import ditron
from ditron.runtime.world import current

#: device cycles rank 0's first stream sleeps before its call (~25 ms on an H200)
SLEEP_CYCLES = 50_000_000


def _gathered(x: torch.Tensor) -> torch.Tensor:
    parts = [torch.empty(x.shape) for _ in range(dist.get_world_size())]
    dist.all_gather(parts, x.float().cpu(), group=current().host_group)
    return torch.cat(parts)


def _summed(x: torch.Tensor) -> torch.Tensor:
    parts = [torch.empty(x.shape) for _ in range(dist.get_world_size())]
    dist.all_gather(parts, x.float().cpu(), group=current().host_group)
    return torch.stack(parts).sum(0)


def _exchanged(x: torch.Tensor) -> torch.Tensor:
    """What an even all-to-all gives this rank: block ``me`` of every rank's ``x``."""
    w, me = dist.get_world_size(), ditron.world().rank
    return _gathered(x).view(w, w, -1, *x.shape[1:])[:, me].reshape(x.shape)


def _a2a_device(x: torch.Tensor) -> torch.Tensor:
    w = ditron.world().world_size
    splits = torch.full((w,), x.shape[0] // w, dtype=torch.int64, device=x.device)
    return ditron.ops.all_to_all_device(x, splits, x.shape[0])[0]


def _cases(w: int, me: int):
    """(name, the shapes of a call's inputs, the call, the fp32 reference of its inputs,
    the error allowed relative to the reference's largest magnitude)."""
    return [
        ("all_reduce sm", [(5000,)],
         lambda x: ditron.ops.all_reduce(x, "one_shot", engine="sm"), _summed, 0.02),
        ("all_to_all_device", [(8 * w, 64)], _a2a_device, _exchanged, 0.0),
        ("all_gather copy_engine", [(6, 333)],
         lambda x: ditron.ops.all_gather(x, engine="copy_engine"), _gathered, 0.0),
        ("ag_gemm colocated", [(70, 96), (96, 80)],
         lambda a, b: ditron.ops.ag_gemm(a, b, method="overlap", engine="colocated"),
         lambda a, b: _gathered(a) @ b.float().cpu(), 0.02),
        ("gemm_rs overlap", [(70 * w, 96), (96, 80)],
         lambda a, b: ditron.ops.gemm_rs(a, b, method="overlap"),
         lambda a, b: _summed(a.float() @ b.float()).chunk(w)[me], 0.02),
    ]


def _rank_two_streams() -> int:
    w, me = ditron.world().world_size, ditron.world().rank
    dev = ditron.world().device
    s1, s2 = torch.cuda.Stream(), torch.cuda.Stream()
    checks = 0
    for name, shapes, call, ref, tol in _cases(w, me):
        for rnd in range(3):
            g = torch.Generator().manual_seed(1000 * rnd + me)
            args_a, args_b = ([torch.randn(s, generator=g).to(torch.bfloat16).to(dev)
                               for s in shapes] for _ in range(2))
            torch.cuda.synchronize()
            with torch.cuda.stream(s1):
                if me == 0:
                    torch.cuda._sleep(SLEEP_CYCLES)
                out_a = call(*args_a)
            with torch.cuda.stream(s2):
                out_b = call(*args_b)
            torch.cuda.synchronize()
            for what, out, args in (("A (stream 1)", out_a, args_a),
                                    ("B (stream 2)", out_b, args_b)):
                want = ref(*args)
                err = (out.float().cpu() - want).abs().max().item()
                assert err <= tol * want.abs().max().item(), \
                    f"rank {me}: {name} call {what}, round {rnd}: max error {err}"
                checks += 1
    return checks


@pytest.mark.gpu
def test_calls_from_two_streams_follow_in_issue_order(monkeypatch):
    monkeypatch.setenv("DITRON_LAUNCH_TIMEOUT", "150")  # unordered, a call may hang
    assert ditron.launch(_rank_two_streams, 2, backend="cuda") == [30, 30]
