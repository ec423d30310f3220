"""The tile configs the tuner tries start with the ones the op runs untuned on the same
operands (``kernels.gemm.default_config``): fp32 operands, and operands whose loads cannot
be vectorized, take other tiles than the 16-bit aligned default, and the tuner timed only
its list of 16-bit tiles there (for fp32 on an H100/H200 none of them fits shared memory,
so ``tune`` refused every fp32 shape the ops take).

The GPU cases run on the CPU with a device that answers as an H100's (its shared memory
per block), which is all ``fits`` asks of it."""

from __future__ import annotations

import types

import pytest
import torch

from ditron.kernels.gemm import EPI_ALL_REDUCE, EPI_REDUCE_SCATTER, EPI_STORE, default_config, fits
from ditron.tune import tuner

H100_SMEM = 232448  # bytes of shared memory a block may opt in to on an H100 / H200


@pytest.fixture
def h100(monkeypatch):
    props = types.SimpleNamespace(shared_memory_per_block_optin=H100_SMEM,
                                  multi_processor_count=132)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda device=None: props)
    return torch.device("cuda", 0)


def _operands(op: str, dtype: torch.dtype, K: int, N: int = 256, M: int = 512):
    a = torch.empty(M, K, dtype=dtype)
    return a, torch.empty(N, K, dtype=dtype).t()


@pytest.mark.parametrize("op", tuner.TUNED_OPS)
def test_fp32_has_candidates_on_a_hopper_gpu(h100, op):
    """``tune(op, ..., torch.float32)`` raised "no candidate tile config fits shared
    memory" on a GPU: every tile of ``GPU_CANDIDATES`` needs more than 227 KB in fp32."""
    assert not any(fits(c, h100, torch.float32) for c in tuner.GPU_CANDIDATES)
    args = (op, 512, 256, 256, torch.float32, 3, 5, None, None, "t", 2, h100)
    assert tuner._checked(*args)[7] is None  # chosen from the operands, not refused
    a, b = _operands(op, torch.float32, 256)
    got = tuner.default_candidates(op, a, b, h100, scalar=False)
    assert got == [default_config(h100, torch.float32, (a, b), scalar=False)]
    assert got[0].block_n == 128 and fits(got[0], h100, torch.float32)


@pytest.mark.parametrize("op", tuner.TUNED_OPS)
def test_unaligned_operands_time_the_tiles_they_run(h100, op):
    """Operands whose loads cannot be vectorized run 128 x 128 x 32 tiles (64 x 128 x 32
    with a reduce-scatter or all-reduce epilogue) untuned: the 128 x 256 x 64 default of
    aligned operands spills there. The tuner timed only the latter, so its decision for
    the scalar-loads key compared the fallback with tiles the op never runs."""
    a, b = _operands(op, torch.bfloat16, 100)
    got = tuner.default_candidates(op, a, b, h100, scalar=True)
    epilogue = {"gemm_rs": EPI_REDUCE_SCATTER, "gemm_ar": EPI_ALL_REDUCE}.get(op, EPI_STORE)
    own = default_config(h100, torch.bfloat16, (a, b), epilogue, scalar=True)
    assert own not in tuner.GPU_CANDIDATES
    assert (own.block_m, own.block_n, own.block_k) == ((128 if op == "ag_gemm" else 64),
                                                       128, 32)
    assert got == [own, *tuner.GPU_CANDIDATES]  # the listed tiles all fit in 16 bits


@pytest.mark.parametrize("op", tuner.TUNED_OPS)
def test_aligned_16_bit_operands_keep_the_listed_tiles(h100, op):
    """The common case is unchanged: the op's default is the list's first."""
    a, b = _operands(op, torch.bfloat16, 256)
    assert tuner.default_candidates(op, a, b, h100, scalar=False) == tuner.GPU_CANDIDATES


def test_the_cpu_keeps_its_candidates():
    a, b = _operands("gemm_rs", torch.float32, 16)
    got = tuner.default_candidates("gemm_rs", a, b, torch.device("cpu"), scalar=False)
    assert got == tuner.CPU_CANDIDATES
