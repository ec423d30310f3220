"""The public ops on tensors laid out unusually: expanded (stride 0), self-overlapping
(``as_strided``), transposed, channels_last, permuted 3-D, empty with odd strides, rows of
one element. Each op returns torch's result on fresh random inputs, or raises a clear
``ValueError`` on every rank before anything moves; never a wrong result.

Before: an ``out`` (``all_gather``, ``reduce_scatter``, ``recv``, ``grouped_gemm``) whose
elements overlap without a stride 0 was written, racing, and held no right value; a
``grouped_gemm`` ``out`` overlapping ``x`` was read while written; ``moe_combine`` of a
``y`` with rows of one element but not stride 1 (a transpose), or of an empty ``y`` with
strides ``(0, 0)``, raised in the gather-sum kernel's checks after the rows had moved;
``moe_dispatch`` of tensors on another device than the rank's crashed in a routing kernel
on that rank alone while its peers waited in the exchange."""

from __future__ import annotations

import pytest
import torch

import ditron
from ditron import ops
from ditron.kernels.gather_sum import gather_dot, weighted_gather_sum

from .test_collectives import _gather_fp32, _gen

REFUSED = r"(?s)a rank refused the call's arguments:\n  rank 0: ValueError: .*share memory"


def test_shares_memory_by_layout():
    """Strides tell most layouts; interleaved ones are told by their elements' offsets."""
    from ditron.runtime.tensor_spans import shares_memory

    x = torch.empty(4, 6)
    distinct = [x, x.t(), x[::2, 1::3], torch.empty(2, 3, 4, 5).to(
        memory_format=torch.channels_last), x[:1].expand(1, 6), torch.empty(0, 3).expand(5, 0, 3),
        torch.ones(()).expand(0, 4), x.view(-1).as_strided((3, 2), (2, 3)),
        x.view(-1).as_strided((3, 3), (2, 3)), x.view(-1).as_strided((4, 1), (1, 0))]
    shared = [x[:1].expand(4, 6), x.view(-1).as_strided((4, 4), (1, 1)),
              x.view(-1).as_strided((4, 3), (2, 3)), x.view(-1).as_strided((2, 2), (2, 2)),
              torch.ones(()).expand(2, 1, 3)]
    assert [shares_memory(t) for t in distinct] == [False] * len(distinct)
    assert [shares_memory(t) for t in shared] == [True] * len(shared)


def _rows(src: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
    return torch.where((idx >= 0)[..., None], src[idx.clamp(min=0)].double(), 0.0)


def test_gather_kernels_take_rows_of_one_element_or_none():
    """A row's stride in dim 1 matters only where rows have two elements or more: ``[R, 1]``
    sources and gradients from a transpose, and empty ones with strides ``(0, 0)`` (the
    gradient of ``out.sum()`` over zero tokens), give torch's results."""
    g = _gen(3, 1)
    R, T, k = 6, 5, 3
    idx = torch.randint(-1, R, (T, k), generator=g)
    src = torch.randn(1, R, generator=g).t()  # [R, 1], strides (1, R)
    src2 = torch.randn(1, R, generator=g).t()
    idx2 = torch.randint(-1, R, (T, k), generator=g)
    grad = torch.randn(1, T, generator=g).t()
    weights = torch.rand(T, k, generator=g)
    both = torch.where((idx >= 0)[..., None], _rows(src, idx), _rows(src2, idx2))
    torch.testing.assert_close(weighted_gather_sum(src, idx, weights, src2=src2, idx2=idx2),
                               (both * weights[..., None].double()).sum(1).float())
    torch.testing.assert_close(gather_dot(src, idx, grad, src2=src2, idx2=idx2),
                               (both * grad[:, None, :].double()).sum(-1).float())
    # empty, strides (0, 0): no tokens, no source rows, rows of no element
    none = torch.ones(()).expand(0, 4)
    assert gather_dot(torch.randn(R, 4, generator=g), idx[:0], none).shape == (0, k)
    assert torch.equal(weighted_gather_sum(none, torch.full((T, k), -1)), torch.zeros(T, 4))
    assert torch.equal(gather_dot(torch.ones(()).expand(R, 0), idx, torch.ones(()).expand(T, 0)),
                       torch.zeros(T, k))


def _overlapping(shape: tuple[int, int], dev: torch.device) -> torch.Tensor:
    """A tensor of ``shape`` whose rows overlap (strides ``(1, 1)``), NaN-filled."""
    return torch.full((sum(shape),), float("nan"), device=dev).as_strided(shape, (1, 1))


def check_overlapping_outputs() -> int:
    """Rank 0 passes an ``out`` whose elements overlap: every rank raises before anything
    moves, and the next good call is right. Then the point-to-point and local cases."""
    w, me, dev = ditron.world().world_size, ditron.world().rank, ditron.world().device
    checks = 0
    for it in range(2):
        xs = [torch.randn(2 * w, 3, generator=_gen(r, it, 81)) for r in range(w)]
        x = xs[me].to(dev)
        for op, shape, want in (("all_gather", (2 * w * w, 3), torch.cat(xs)),
                                ("reduce_scatter", (2, 3), sum(xs).chunk(w)[me])):
            out = (_overlapping(shape, dev) if me == 0
                   else torch.full(shape, float("nan"), device=dev))
            with pytest.raises(ValueError, match="share memory" if me == 0 else REFUSED):
                getattr(ops, op)(x, out=out)
            good = torch.full(shape, float("nan"), device=dev)
            torch.testing.assert_close(getattr(ops, op)(x, out=good).cpu(), want)
            checks += 2
    # recv into overlapping rows: refused on the receiver; the sender's rows are taken
    if w > 1:
        sent = torch.randn(4, 5, generator=_gen(82)).to(dev)
        if me == 0:
            ops.send(sent, 1)
            ops.send(sent + 1, 1)
        elif me == 1:
            with pytest.raises(ValueError, match="share memory"):
                ops.recv(_overlapping((4, 5), dev), 0)
            assert torch.equal(ops.recv((4, 5), 0).cpu(), (sent + 1).cpu())
        checks += 1
    # grouped_gemm: an out overlapping itself or x
    G, R, K, N = 3, 10, 5, 4
    offsets = torch.tensor([0, 3, 3, 8], device=dev)
    buf = torch.randn(R, K + N, generator=_gen(me, 83)).to(dev)
    wg = torch.randn(G, K, N, generator=_gen(me, 84)).to(dev)
    for out, words in ((_overlapping((R, N), dev), "share memory"),
                       (buf[:, K - 1:K - 1 + N], "out overlaps x")):
        with pytest.raises(ValueError, match=words):
            ops.grouped_gemm(buf[:, :K], wg, offsets, out=out)
        checks += 1
    return checks


@pytest.mark.parametrize("world_size", [1, 2, 3])
def test_overlapping_outputs_are_refused(world_size, backend, monkeypatch):
    monkeypatch.setenv("DITRON_CHECK_CALLS", "1")  # every call checked: peers hear of rank 0
    monkeypatch.setenv("DITRON_WAIT_TIMEOUT", "20")
    got = ditron.launch(check_overlapping_outputs, world_size, backend=backend)
    assert got == [8 + (world_size > 1) + 2] * world_size


TOPK = 2


def _combined(x: torch.Tensor, ids: torch.Tensor, weights: torch.Tensor | None,
              cols: int) -> torch.Tensor:
    """The combine of identity experts: each routed copy of ``x[t]``'s first ``cols``
    columns, weighted."""
    w = torch.ones(ids.shape, dtype=x.dtype) if weights is None else weights.cpu()
    return ((ids.cpu() >= 0).to(x.dtype) * w).sum(1, keepdim=True) * x.cpu()[:, :cols]


def check_moe_layouts() -> int:
    w, me, dev = ditron.world().world_size, ditron.world().rank, ditron.world().device
    E, T, H = 2 * w, 5, 6
    checks = 0
    for it in range(2):
        x = torch.randn(H, T, generator=_gen(me, it, 91)).t().to(dev)  # transposed
        ids = torch.randint(-1, E, (T, TOPK), generator=_gen(me, it, 92)).to(dev)
        weights = torch.rand((), generator=_gen(me, it, 93)).expand(T, TOPK).to(dev)
        d = ops.moe_dispatch(x, ids, E)
        # y [capacity, 1] from a transpose (stride 1 in dim 0), y of no columns
        y1 = d.x[:, :1].t().contiguous().t()
        assert y1.stride(1) != 1
        torch.testing.assert_close(ops.moe_combine(y1, d, weights).cpu(),
                                   _combined(x, ids, weights, 1))
        y0 = torch.ones((), device=dev).expand(d.x.shape[0], 0)
        assert ops.moe_combine(y0, d).shape == (T, 0)
        torch.testing.assert_close(ops.moe_combine(d.x[:, :1].expand(-1, 3), d).cpu(),
                                   _combined(x, ids, None, 1).expand(-1, 3))
        checks += 3
    # no tokens on any rank, every tensor empty with strides (0, 0)
    nothing = torch.ones((), device=dev).expand(0, H)
    d = ops.moe_dispatch(nothing, torch.zeros((), dtype=torch.int64, device=dev).expand(0, TOPK),
                         E)
    out = ops.moe_combine(torch.ones((), device=dev).expand(*d.x.shape), d,
                          torch.ones((), device=dev).expand(0, TOPK))
    assert out.shape == (0, H)
    # rank 0's tokens on another device: every rank refuses, before any kernel
    x = torch.randn(T, H, generator=_gen(me, 94)).to(dev)
    ids = torch.randint(0, E, (T, TOPK), generator=_gen(me, 95)).to(dev)
    if me == 0:
        with pytest.raises(ValueError, match="x and topk_ids must be on"):
            ops.moe_dispatch(x.to("meta"), ids.to("meta"), E)
    elif w > 1:
        with pytest.raises(ValueError, match=r"(?s)refused the call's arguments:.*rank 0: .*"
                                             r"x and topk_ids must be on"):
            ops.moe_dispatch(x, ids, E)
    d = ops.moe_dispatch(x, ids, E)
    torch.testing.assert_close(ops.moe_combine(d.x, d).cpu(), _combined(x, ids, None, H))
    return checks + 2


@pytest.mark.parametrize("world_size", [1, 2])
def test_moe_on_unusual_layouts(world_size, backend, monkeypatch):
    monkeypatch.setenv("DITRON_CHECK_CALLS", "1")
    monkeypatch.setenv("DITRON_WAIT_TIMEOUT", "20")
    got = ditron.launch(check_moe_layouts, world_size, backend=backend)
    assert got == [8] * world_size


def _inputs(me: int, w: int) -> dict[str, torch.Tensor]:
    g = _gen(me, 96)
    return {
        "expanded rows": torch.randn(1, 5, generator=g).expand(2 * w, 5),
        "expanded": torch.randn((), generator=g).expand(2 * w, 5),
        "overlapping": torch.randn(40, generator=g).as_strided((2 * w, 5), (1, 1)),
        "strided": torch.randn(4 * w, 10, generator=g)[::2, ::2],
        "permuted 3-d": torch.randn(3, 2 * w, 4, generator=g).permute(1, 2, 0),
        "channels_last": torch.randn(2 * w, 3, 2, 2, generator=g).to(
            memory_format=torch.channels_last),
        "empty (0, 0)": torch.ones(()).expand(0, 5),
    }


def check_collectives_on_layouts() -> int:
    """Every collective in every dim (all_to_all: dim 0) and the TP GEMMs on inputs laid
    out unusually, against torch.distributed's results."""
    w, me, dev = ditron.world().world_size, ditron.world().rank, ditron.world().device
    checks = 0
    for name, x in _inputs(me, w).items():
        parts = _gather_fp32(x)
        total = torch.stack(parts).sum(0)
        x = x.to(dev)
        for engine in ("copy_engine", "sm"):
            torch.testing.assert_close(ops.all_reduce(x, engine=engine).cpu(), total, msg=name)
            for d in range(x.dim()):
                assert torch.equal(ops.all_gather(x, d, engine=engine).cpu(),
                                   torch.cat(parts, d)), (name, d, engine)
                if x.shape[d] % w == 0:
                    torch.testing.assert_close(ops.reduce_scatter(x, d, engine=engine).cpu(),
                                               total.chunk(w, d)[me], msg=name)
            assert torch.equal(ops.all_to_all(x, engine=engine).cpu(),
                               torch.cat([p.chunk(w)[me] for p in parts])), (name, engine)
            checks += 1
    b = torch.randn(5, 1, generator=_gen(97)).expand(5, 3).to(dev)
    for name in ("expanded rows", "overlapping", "strided"):
        a = _inputs(me, w)[name].to(dev)
        a_all = _gather_fp32(a)
        for method in ("overlap", "fallback"):
            torch.testing.assert_close(ops.ag_gemm(a, b, method=method).cpu(),
                                       torch.cat(a_all) @ b.cpu(), rtol=1e-4, atol=1e-4)
            torch.testing.assert_close(ops.gemm_rs(a, b, method=method).cpu(),
                                       (sum(a_all) @ b.cpu()).chunk(w)[me], rtol=1e-4,
                                       atol=1e-4)
            torch.testing.assert_close(ops.gemm_ar(a, b, method=method).cpu(),
                                       sum(a_all) @ b.cpu(), rtol=1e-4, atol=1e-4)
            checks += 1
    return checks


@pytest.mark.parametrize("world_size", [1, 3])
def test_collectives_on_unusual_layouts(world_size, backend):
    got = ditron.launch(check_collectives_on_layouts, world_size, backend=backend)
    assert got == [2 * 7 + 6] * world_size
