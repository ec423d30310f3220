"""The TP GEMMs' refusals of options and shapes they cannot take, the same on every rank
and whatever path the call takes: ``gemm_rs``'s ``early_rows`` without its engine, and
ranks whose shapes differ (uneven shards).
After each refusal the op still runs, checked against torch on fresh random inputs with
poisoned outputs."""

from __future__ import annotations

import pytest
import torch

import ditron

from .poison import poison_empty
from .test_tp_gemm import _close, _sum

METHODS = ("fallback", "overlap", "auto")


def _early_rows_case() -> int:
    """``early_rows`` without ``engine="copy_engine"``: refused on every path."""
    poison_empty()
    w = ditron.world()
    torch.manual_seed(1000 + w.rank)
    m, K, N = 5, 12, 9
    a = torch.randn(w.world_size * m, K, device=w.device)
    b = torch.randn(N, K, device=w.device).t()
    checks = 0
    for method in METHODS:
        with pytest.raises(ValueError, match=r"^ditron\.ops\.gemm_rs: early_rows applies to "
                                             r"engine='copy_engine' only, and needs it named"):
            ditron.ops.gemm_rs(a, b, method=method, early_rows=2)
        got = ditron.ops.gemm_rs(a, b, method=method, engine="copy_engine", early_rows=2)
        _close(f"gemm_rs[{method}, early_rows=2]", got,
               _sum(a.double() @ b.double())[w.rank * m:(w.rank + 1) * m], torch.float32)
        checks += 1
    # zero early rows asks for nothing: any engine
    got = ditron.ops.gemm_rs(a, b, method="overlap", early_rows=0)
    _close("gemm_rs[early_rows=0]", got,
           _sum(a.double() @ b.double())[w.rank * m:(w.rank + 1) * m], torch.float32)
    return checks + 1


@pytest.mark.parametrize("world_size", [1, 2, 3])
def test_early_rows_needs_the_pushed_engine_named_on_every_path(world_size, backend):
    # before, early_rows without an engine had no effect where the call fell back (by
    # method, one rank, or "auto"'s choice) and raised where "auto" or "overlap" took
    # another engine: whether a call raised depended on the tuning cache
    assert ditron.launch(_early_rows_case, world_size, backend=backend) == [4] * world_size


def _uneven_shards_case() -> list[str]:
    """Shapes that differ across ranks (an FFN dimension ``W`` does not divide, shards of
    unequal rows): every rank raises, naming the op, each rank's shapes and what the op
    takes; then an even call runs."""
    poison_empty()
    w = ditron.world()
    torch.manual_seed(3000 + w.rank)
    M, N = 4 * w.world_size, 6
    k = 5 + (w.rank == w.world_size - 1)  # the last rank holds one more column of K
    seen = []
    for op in ("gemm_rs", "gemm_ar"):
        with pytest.raises(ValueError) as info:
            getattr(ditron.ops, op)(torch.randn(M, k, device=w.device),
                                    torch.randn(k, N, device=w.device))
        msg = str(info.value)
        assert msg.startswith(f"ditron.ops.{op}: ranks disagree on the call (a_shape, b_shape "
                              f"differ)"), msg
        assert f"a_shape=({M}, 6), b_shape=(6, {N})" in msg, msg
        assert msg.endswith(f"ditron.ops.{op} takes a [M, k] and b [k, N] with the same M, k "
                            f"and N on every rank (k = K / W: uneven K shards, such as an FFN "
                            f"dimension that W does not divide, are not supported; pad them "
                            f"to equal k)"), msg
        seen.append(op)
    with pytest.raises(ValueError) as info:
        ditron.ops.ag_gemm(torch.randn(3 + w.rank, 4, device=w.device),
                           torch.randn(4, N, device=w.device))
    assert str(info.value).endswith("ditron.ops.ag_gemm takes a [m, K] and b [K, N] with the "
                                    "same m, K and N on every rank (it gathers equal shards "
                                    "of m rows)"), str(info.value)
    seen.append("ag_gemm")
    # M that the world size does not divide, on one rank: named with a's shape, every rank
    rows = M + (w.rank == 0)
    with pytest.raises(ValueError) as info:
        ditron.ops.gemm_rs(torch.randn(rows, 5, device=w.device),
                           torch.randn(5, N, device=w.device))
    assert (f"ditron.ops.gemm_rs: a ({M + 1}, 5): M = {M + 1} rows is not divisible by the "
            f"world size {w.world_size}") in str(info.value), str(info.value)
    seen.append("divisible")
    a = torch.randn(M, 5, device=w.device)
    b = torch.randn(5, N, device=w.device)
    _close("gemm_rs", ditron.ops.gemm_rs(a, b, method="overlap"),
           _sum(a.double() @ b.double())[w.rank * 4:(w.rank + 1) * 4], torch.float32)
    return seen


@pytest.mark.parametrize("world_size", [2, 3])
def test_uneven_shards_raise_on_every_rank_naming_the_shapes_taken(world_size, backend):
    # before, the disagreement listed each rank's shapes but not what the op takes (that
    # K shards must be equal), and the divisibility error did not name the argument
    assert ditron.launch(_uneven_shards_case, world_size, backend=backend) == [
        ["gemm_rs", "gemm_ar", "ag_gemm", "divisible"]] * world_size
