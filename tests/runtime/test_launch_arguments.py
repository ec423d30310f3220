"""``ditron.launch``'s arguments are each rank's own copies, as under torchrun. They went to
the ranks as ``multiprocessing`` sends a process's arguments, which moves a tensor's
storage into shared memory: every rank and the caller then held one tensor, and a rank's
in-place update showed on its peers and in the caller."""

from __future__ import annotations

import pytest
import torch

import ditron


def _write_own_rank(x: torch.Tensor, view: torch.Tensor, pair: tuple) -> list:
    """Each rank writes its rank into its arguments in place, then (after a barrier: every
    rank has written) returns what it holds."""
    me = ditron.world().rank
    a, b = pair
    received = [x.clone(), view.clone(), a.clone(), a is b]
    x.fill_(me + 1)
    view.add_(100 * (me + 1))
    a.mul_(me + 2)
    ditron.barrier()
    return [*received, x.clone(), view.clone(), b.clone()]


def test_each_rank_gets_its_own_copy_of_the_arguments(backend):
    g = torch.Generator().manual_seed(int(torch.randint(0, 2**31 - 1, ())))
    x = torch.randn(5, 7, generator=g)
    base = torch.randn(6, 9, generator=g)
    view = base.t()[2:7, 1:]  # a strided view at an offset into a larger storage
    shared = torch.randn(3, generator=g)
    want_x, want_base, want_view, want_shared = x.clone(), base.clone(), view.clone(), \
        shared.clone()
    world_size = 3
    results = ditron.launch(_write_own_rank, world_size, x, view, (shared, shared),
                            backend=backend)
    for rank, (got_x, got_view, got_a, same, after_x, after_view, after_b) in \
            enumerate(results):
        assert torch.equal(got_x, want_x) and torch.equal(got_view, want_view)
        assert torch.equal(got_a, want_shared) and same  # one object stays one object
        assert torch.equal(after_x, torch.full_like(want_x, rank + 1))
        assert torch.equal(after_view, want_view + 100 * (rank + 1))
        assert torch.equal(after_b, want_shared * (rank + 2))
    assert torch.equal(x, want_x) and torch.equal(base, want_base)
    assert torch.equal(shared, want_shared)


def _device_of(x: torch.Tensor, p: torch.nn.Parameter) -> tuple:
    """Where this rank's copies of ``x`` and ``p`` are, against its own device; their values
    (on the host)."""
    me = ditron.world().device
    return x.device == me, p.device == me, p.requires_grad, x.cpu(), p.detach().cpu()


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_arguments_arrive_on_each_ranks_own_gpu():
    """A CUDA tensor argument is copied onto each rank's own GPU (pickled as it was, every
    rank's copy went to the caller's GPU: a copy per rank there)."""
    x = torch.randn(4, 5, device="cuda")
    p = torch.nn.Parameter(torch.randn(3, device="cuda"))
    for on_x, on_p, grad, got_x, got_p in ditron.launch(_device_of, 2, x, p, backend="cuda"):
        assert on_x and on_p and grad
        assert torch.equal(got_x, x.cpu()) and torch.equal(got_p, p.detach().cpu())
