"""Conjugate and negative views (``z.conj()``, ``z.conj().imag``: their bits are not their
values) given to the public ops, as inputs and as ``out=``: every op computes on their values
and writes an output view's values (``ops/modes.py``). The kernels read raw bits: before,
the SM / TMA collectives, the TP GEMMs and the device all-to-all returned the un-negated
values of a negative view."""

from __future__ import annotations

import pytest
import torch

import ditron

from .test_collectives import _gen


def check_views() -> int:
    w, me, dev = ditron.world().world_size, ditron.world().rank, ditron.world().device
    checks = 0
    for it in range(2):  # twice: workspaces and decisions of the first call are reused
        xs = [torch.randn(w * 3, 5, generator=_gen(r, it, 71)) for r in range(w)]
        total = torch.stack(xs).sum(0)
        x = torch._neg_view((-xs[me]).to(dev))  # values xs[me], bits -xs[me]
        assert x.is_neg() and torch.equal(x.cpu(), xs[me])
        for engine in (None, "copy_engine", "sm", "tma", "network"):
            kw = {} if engine is None else {"engine": engine}
            torch.testing.assert_close(ditron.ops.all_reduce(x, **kw).cpu(), total)
            torch.testing.assert_close(ditron.ops.reduce_scatter(x, **kw).cpu(),
                                       total.chunk(w)[me])
            assert torch.equal(ditron.ops.all_gather(x, **kw).cpu(), torch.cat(xs)), engine
            # out= a negative view: written through, returned as given
            out = torch._neg_view(torch.full((w * w * 3, 5), float("nan"), device=dev))
            got = ditron.ops.all_gather(x, out=out, **kw)
            assert got is out and torch.equal(out.cpu(), torch.cat(xs)), engine
            out = torch._neg_view(torch.full((3, 5), float("nan"), device=dev))
            got = ditron.ops.reduce_scatter(x, out=out, **kw)
            assert got is out
            torch.testing.assert_close(out.cpu(), total.chunk(w)[me])
            checks += 5
        # TP GEMMs: a negative view of either operand
        a_all = [torch.randn(5, 8, generator=_gen(r, it, 72)) for r in range(w)]
        b = torch.randn(8, 6, generator=_gen(it, 73))
        a = a_all[me].to(dev)
        na, nb = torch._neg_view((-a).clone()), torch._neg_view((-b).to(dev))
        want = torch.cat(a_all) @ b
        for args in ((na, b.to(dev)), (a, nb)):
            torch.testing.assert_close(ditron.ops.ag_gemm(*args).cpu(), want,
                                       rtol=1e-4, atol=1e-4)
            partial = sum(ar @ b for ar in a_all)
            torch.testing.assert_close(ditron.ops.gemm_ar(*args).cpu(), partial,
                                       rtol=1e-4, atol=1e-4)
            checks += 2
        # the device all-to-all, one row to every rank
        ones = torch.ones(w, dtype=torch.int64, device=dev)
        out, _ = ditron.ops.all_to_all_device(x[:w], ones, w)
        assert torch.equal(out.cpu(), torch.stack([xs[r][me] for r in range(w)]))
        checks += 1
    return checks


@pytest.mark.parametrize("world_size", [1, 2, 3])
def test_negative_views_in_and_out(world_size, backend):
    per_call = 5 * 5 + 4 + 1
    assert ditron.launch(check_views, world_size, backend=backend) == [2 * per_call] * world_size


def check_conjugate_out() -> int:
    """A complex all_gather into a conjugate view of ``out``: its values are the gathered
    values (the storage holds their conjugates)."""
    w, me, dev = ditron.world().world_size, ditron.world().rank, ditron.world().device
    zs = [torch.randn(2, 3, dtype=torch.complex64, generator=_gen(r, 74)) for r in range(w)]
    store = torch.zeros(2 * w, 3, dtype=torch.complex64, device=dev)
    got = ditron.ops.all_gather(zs[me].to(dev).conj(), out=store.conj())
    assert got.is_conj() and torch.equal(got.resolve_conj().cpu(),
                                         torch.cat([z.conj() for z in zs]))
    assert torch.equal(store.cpu(), torch.cat(zs))
    return 1


def test_conjugate_out(backend):
    assert ditron.launch(check_conjugate_out, 2, backend=backend) == [1, 1]
