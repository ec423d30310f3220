"""Tuned decisions are kept per alignment class of the operands: a decision measured on
operands whose loads vectorize (what the tuner times) does not serve a call whose loads
cannot (``kernels.gemm.scalar_loads``: the persistent GEMM 1.2-2.6x slower there), which
takes the cost model, charged that slowdown, unless it was tuned so itself.

``scalar_loads`` answers "no" on the CPU backend; the cases below make it answer as a GPU
without TMA would (``alignment.vector_loads`` of both operands), as
``tests/ops/test_tp_gemm.py`` does."""

from __future__ import annotations

import dataclasses
import json

import pytest
import torch
import torch.distributed as dist

import ditron
from ditron.tune import cache

M, N, K = 8, 12, 16


def _gpu_like(a: torch.Tensor, b: torch.Tensor, device: torch.device) -> bool:
    from ditron.kernels.alignment import vector_loads

    return not (vector_loads(a) and vector_loads(b))


def _reference(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """``reduce_scatter(a @ b)`` through gloo on CPU copies."""
    from ditron.runtime.world import current

    full = a.double() @ b.double()
    dist.all_reduce(full, group=current().host_group)
    w = ditron.world()
    rows = full.shape[0] // w.world_size
    return full[w.rank * rows:(w.rank + 1) * rows]


def _plant(directory: str) -> None:
    """Rank 0 caches, for ``gemm_rs`` on ``[M, K] @ [K, N]``: the pulled copy engine for
    aligned operands; for ``[M, 2 K] @ [2 K, N]``, the pushed copy engine in two chunks
    for operands whose loads cannot vectorize (and nothing for aligned ones)."""
    import os

    from ditron.ops import tp_gemm
    from ditron.tune import decisions

    os.environ["DITRON_CACHE_DIR"] = directory
    cfg = tp_gemm.default_config(ditron.world().device, torch.float32)
    if ditron.world().rank == 0:
        cache.put(decisions.key_for("gemm_rs", M, N, K, torch.float32, 2),
                  dataclasses.asdict(decisions.Decision("overlap", cfg, "copy_engine_pull")))
        cache.put(decisions.key_for("gemm_rs", M, N, 2 * K, torch.float32, 2, scalar=True),
                  dataclasses.asdict(decisions.Decision("overlap", cfg, "copy_engine", 0.0, 2)))
    ditron.barrier()


def _choices_case(directory: str) -> list:
    """The choice ``auto`` makes and the ``gemm_slowdown`` the cost model is asked with,
    for aligned operands and for a view of ``a`` one column in (``a[:, 1:]``: base and row
    stride off the 16-element grid), on both shapes; each call checked against torch."""
    from ditron.ops import tp_gemm
    from ditron.tune import cost_model

    _plant(directory)
    asked: list[float] = []
    real = cost_model.overlap_pays

    def spy(*args, gemm_slowdown=1.0, **kwargs):
        asked.append(gemm_slowdown)
        return real(*args, gemm_slowdown=gemm_slowdown, **kwargs)

    cost_model.overlap_pays = spy
    tp_gemm.scalar_loads = _gpu_like
    torch.manual_seed(ditron.world().rank)
    seen = []
    for k in (K, 2 * K):
        b = torch.randn(N, k).t()
        for a in (torch.randn(M, k), torch.randn(M, k + 1)[:, 1:]):
            choice = tp_gemm._choose("gemm_rs", "auto", M, a, b, None)
            seen.append((choice.overlap, choice.engine, choice.chunk_rows)
                        if choice.tuned else "untuned")
            got = ditron.ops.gemm_rs(a, b)
            assert torch.allclose(got.double(), _reference(a, b), rtol=1e-5, atol=1e-4)
    return [seen, asked]


def test_misaligned_calls_do_not_take_decisions_tuned_on_aligned_operands(tmp_path):
    """The aligned call takes the decision tuned for aligned operands; the misaligned view
    of the same shape used to take it too (an "overlap" measured at vector-load speed, where
    the cost model would charge the scalar loads' slowdown and may fall back): it now asks
    the cost model (rank 0 decides, with ``SCALAR_LOADS_SLOWDOWN``). A shape tuned on
    misaligned operands serves misaligned calls only."""
    from ditron.tune.cost_model import FP32_SLOWDOWN, SCALAR_LOADS_SLOWDOWN

    got = ditron.launch(_choices_case, 2, str(tmp_path), backend="cpu")
    seen = [(True, "copy_engine_pull", None), "untuned", "untuned", (True, "copy_engine", 2)]
    # fp32 operands: the aligned call of the untuned shape is charged fp32's slowdown
    assert got == [[seen, [SCALAR_LOADS_SLOWDOWN, FP32_SLOWDOWN]], [seen, []]]


def _mixed_case(directory: str) -> list[str]:
    """Rank 1 passes the misaligned view, rank 0 aligned operands, over a shape with a
    tuned decision: rank 0 alone would take it and rank 1 alone would not, so ``auto``
    raises on every rank (as for any operand property the ranks must share), then runs
    when the ranks match."""
    from ditron.ops import tp_gemm

    _plant(directory)
    tp_gemm.scalar_loads = _gpu_like
    w = ditron.world()
    torch.manual_seed(w.rank)
    b = torch.randn(N, K).t()
    seen = []
    for misaligned in (w.rank == 1, False, True):
        a = torch.randn(M, K + 1)[:, 1:] if misaligned else torch.randn(M, K)
        try:
            got = ditron.ops.gemm_rs(a, b)
        except ValueError as exc:
            seen.append(str(exc).splitlines()[0])
            continue
        assert torch.allclose(got.double(), _reference(a, b), rtol=1e-5, atol=1e-4)
        choice = tp_gemm._choose("gemm_rs", "auto", M, a, b, None)
        seen.append(f"ok {choice.engine if choice.tuned else 'untuned'}")
    return seen


def test_ranks_differing_in_alignment_are_refused_on_every_rank(tmp_path):
    got = ditron.launch(_mixed_case, 2, str(tmp_path), backend="cpu")
    assert got == [["ditron.ops.gemm_rs tiles: ranks disagree on the call "
                    "(unvectorized_loads differs):", "ok copy_engine_pull", "ok untuned"]] * 2


def _tune_keys(directory: str, scalar: bool | None) -> list[str]:
    """The keys ``tune`` writes, with ``scalar_loads`` as the CPU answers it (``None``) or
    forced to ``scalar``."""
    import os

    from ditron.tune import tuner

    os.environ["DITRON_CACHE_DIR"] = directory
    if scalar is not None:
        tuner.scalar_loads = lambda a, b, device: scalar
    tuner.tune("gemm_rs", 4, 8, 8, torch.float32, warmup=0, iters=1, progress=False)
    with open(os.path.join(directory, cache.FILE)) as f:
        keys = sorted(json.load(f))
    # the versions as this rank took them (the sources' digest, read at its import)
    assert all(k.endswith(cache.versions()) for k in keys)
    return [k[:-len(cache.versions())] for k in keys]


@pytest.mark.parametrize("scalar", [None, True], ids=["aligned", "scalar"])
def test_the_tuner_keys_on_the_alignment_of_what_it_times(tmp_path, scalar):
    """Aligned operands (what the tuner times on any shape whose sizes are multiples of 16
    elements) add nothing to the key; operands whose loads cannot vectorize get a key of
    their own."""
    got = ditron.launch(_tune_keys, 1, str(tmp_path), scalar, backend="cpu")[0]
    key = cache.make_key("gemm_rs", (4, 8, 8), "float32", 1, "cpu",
                         "scalar loads" if scalar else "")
    assert got == [key[:-len(cache.versions())]]
