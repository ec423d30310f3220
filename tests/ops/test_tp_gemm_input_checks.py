"""The TP GEMMs' refusals of options and shapes they cannot take, the same on every rank
and whatever path the call takes: ``gemm_rs``'s ``early_rows`` and ``chunk_rows`` without
their engines, chunkings with the colocated engine, and ranks whose shapes differ (uneven
shards).
After each refusal the op still runs, checked against torch on fresh random inputs with
poisoned outputs."""

from __future__ import annotations

import pytest
import torch

import ditron

from .poison import poison_empty
from .test_tp_gemm import _close, _gather, _sum

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


def _tune_as(engine: str | None, m: int, K: int, N: int, a_rs, a_ag, b,
             chunk_rows: int | tuple[int, ...] | None = None) -> None:
    """Make ``method="auto"`` take the overlapped path with ``engine`` for both ops at these
    shapes, with ``chunk_rows`` (a cache entry written by rank 0; ``None``: write none, so
    that with a fresh cache the cost model decides), collectively; the ranks' memo of
    earlier decisions dropped."""
    import dataclasses

    import torch.distributed as dist

    from ditron.ops import tp_gemm
    from ditron.runtime import bounded_cache
    from ditron.runtime.world import current
    from ditron.tune import cache, decisions

    w = ditron.world()
    W = w.world_size
    for op, a in (("gemm_rs", a_rs), ("ag_gemm", a_ag)):
        key = decisions.key_for(op, W * m, N, K, a.dtype, W, decisions.b_layout(b),
                                tp_gemm.scalar_loads(a, b, w.device))
        if w.rank == 0 and engine is not None:
            cfg = tp_gemm.default_config(w.device, a.dtype)
            tuned = decisions.Decision("overlap", cfg, engine, 1.0, chunk_rows)
            cache.put(key, dataclasses.asdict(tuned))
    if W > 1:
        dist.barrier(group=current().host_group)
    bounded_cache.named("tp_gemm").drop(lambda k: k[:1] == ("choice",))


def _chunk_rows_case(cache_dir: str) -> list[str]:
    """A chunking raises on every path or on none, whatever ``method`` and the tuning cache
    choose: untuned, tuned to the colocated engine (which moves tiles) and tuned to a copy
    engine, with each method. ``gemm_rs`` without an engine named (its untuned default is
    the colocated engine), and either op with ``engine="colocated"``, raise; so do chunk
    sizes listing more chunks than the exchange has signals for. ``ag_gemm`` without an
    engine runs (a tuned colocated choice ignores the chunking)."""
    import os

    os.environ["DITRON_CACHE_DIR"] = cache_dir
    poison_empty()
    w = ditron.world()
    W, me = w.world_size, w.rank
    torch.manual_seed(2000 + me)
    m, K, N = 64, 12, 9  # 64 rows per segment: 64 one-row chunks, one more than the signals
    a_rs = torch.randn(W * m, K, device=w.device)
    a_ag = torch.randn(m, K, device=w.device)
    b = torch.randn(N, K, device=w.device).t()
    ref_rs = _sum(a_rs.double() @ b.double())[me * m:(me + 1) * m]
    ref_ag = _gather(a_ag).double() @ b.double()
    seen = []
    for tuned in (None, "colocated", "copy_engine"):
        _tune_as(tuned, m, K, N, a_rs, a_ag, b)
        for method in METHODS:
            at = f"tuned={tuned} method={method}"
            with pytest.raises(ValueError, match=r"^ditron\.ops\.gemm_rs: chunk_rows applies "
                                                 r"to engine='copy_engine' or "
                                                 r"'copy_engine_pull' only, and needs it named"):
                ditron.ops.gemm_rs(a_rs, b, method=method, chunk_rows=16)
            for op, a in (("gemm_rs", a_rs), ("ag_gemm", a_ag)):
                with pytest.raises(ValueError, match=rf"^ditron\.ops\.{op}: chunk_rows applies "
                                                     r"to the engines that move chunks"):
                    getattr(ditron.ops, op)(a, b, method=method, engine="colocated",
                                            chunk_rows=16)
            for engine in ("copy_engine", "copy_engine_pull"):
                with pytest.raises(ValueError, match=r"^ditron\.ops\.gemm_rs: at most 63 "
                                                     r"chunks per segment here"):
                    ditron.ops.gemm_rs(a_rs, b, method=method, engine=engine,
                                       chunk_rows=(1,) * m)
                _close(f"gemm_rs[{at}, {engine}, chunk_rows=16]",
                       ditron.ops.gemm_rs(a_rs, b, method=method, engine=engine,
                                          chunk_rows=16), ref_rs, torch.float32)
            _close(f"ag_gemm[{at}, chunk_rows=16]",
                   ditron.ops.ag_gemm(a_ag, b, method=method, chunk_rows=16), ref_ag,
                   torch.float32)
            seen.append(at)
    return seen


@pytest.mark.parametrize("world_size", [1, 2, 3])
def test_chunk_rows_raise_on_every_path_or_none(world_size, backend, tmp_path):
    # before, gemm_rs(chunk_rows=...) without an engine raised where the overlapped path
    # took the colocated engine (untuned, or tuned so) and ran where the call fell back;
    # ag_gemm(chunk_rows=...) raised only where "auto" followed a tuned colocated choice;
    # chunk sizes past the exchange's signals raised on the copy engines' paths only
    got = ditron.launch(_chunk_rows_case, world_size, str(tmp_path), backend=backend)
    assert got == [[f"tuned={t} method={m}" for t in (None, "colocated", "copy_engine")
                    for m in METHODS]] * world_size


def _tuned_knobs_case(cache_dir: str) -> list[str]:
    """A tuned chunking applies to its own engine only, and not beside a nonzero
    ``early_rows`` given: ``gemm_rs(engine="copy_engine", early_rows=2)`` runs on every
    path whatever chunking the cache holds (a tuned pulled split, or the pushed engine's
    own two chunks)."""
    import os

    os.environ["DITRON_CACHE_DIR"] = cache_dir
    poison_empty()
    w = ditron.world()
    W, me = w.world_size, w.rank
    torch.manual_seed(4000 + me)
    m, K, N = 9, 12, 10
    a_rs = torch.randn(W * m, K, device=w.device)
    b = torch.randn(N, K, device=w.device).t()
    ref = _sum(a_rs.double() @ b.double())[me * m:(me + 1) * m]
    seen = []
    for engine, chunks in (("copy_engine_pull", (m - 4, 4)), ("copy_engine", 5)):
        _tune_as(engine, m, K, N, a_rs, torch.randn(m, K, device=w.device), b, chunks)
        for method in METHODS:
            got = ditron.ops.gemm_rs(a_rs, b, method=method, engine="copy_engine",
                                     early_rows=2)
            _close(f"gemm_rs[tuned {engine} {chunks}, {method}, early_rows=2]", got, ref,
                   torch.float32)
            seen.append(f"{engine} {method}")
        # left to "auto", the tuned pair applies
        _close(f"gemm_rs[tuned {engine} {chunks}]", ditron.ops.gemm_rs(a_rs, b), ref,
               torch.float32)
    return seen


@pytest.mark.parametrize("world_size", [1, 2, 3])
def test_tuned_chunking_goes_with_its_engine_only(world_size, backend, tmp_path):
    # before, a tuned chunking of two chunks served a call naming early_rows (with another
    # engine, or with the pushed one) where "auto" overlapped: it raised "needs one chunk
    # per segment" there and ran where the call fell back
    got = ditron.launch(_tuned_knobs_case, world_size, str(tmp_path), backend=backend)
    assert got == [[f"{e} {m}" for e in ("copy_engine_pull", "copy_engine")
                    for m in METHODS]] * world_size


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
