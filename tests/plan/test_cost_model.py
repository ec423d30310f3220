from __future__ import annotations

from ditron.tune.cost_model import (
    FP32_SLOWDOWN,
    H200,
    SCALAR_LOADS_SLOWDOWN,
    estimate,
    gemm_slowdown,
    overlap_pays,
)


def test_small_gemm_rs_regression_falls_back():
    # REFERENCES.md: GEMM-RS M=4096 N=4096 K=8192 was 93% slower overlapped than torch.
    assert not overlap_pays("gemm_rs", 4096, 4096, 8192 // 8, 8, 2, "cuda", "NVIDIA H200")


def test_estimate_follows_the_roofline():
    e = estimate("ag_gemm", 8192, 14336, 8192, 2, 2, H200)
    assert abs(e.t_gemm - 2 * 8192 * 14336 * 8192 / H200.peak_flops) < 1e-9
    # all_gather moves (W-1)/W of the gathered A per rank
    assert abs(e.t_comm - (8192 * 8192 * 2 / 2 / H200.link_bw + H200.latency)) < 1e-9
    assert e.t_overlap >= max(e.t_gemm, e.t_comm)


def test_a_slower_gemm_can_make_the_fallback_win():
    # AG-GEMM on 2 H200s, bf16, M = 8192, N = 7168, K = 4096: compute-bound, so overlap pays
    # with the persistent GEMM at cuBLAS's speed, but not at the speed measured where its
    # loads do not vectorize; the slowdown lengthens the overlapped op, not cuBLAS's time.
    args = ("ag_gemm", 8192, 7168, 4096, 2, 2)
    assert overlap_pays(*args, "cuda", "NVIDIA H200")
    assert not overlap_pays(*args, "cuda", "NVIDIA H200", gemm_slowdown=SCALAR_LOADS_SLOWDOWN)
    assert overlap_pays(*args, "cpu", gemm_slowdown=SCALAR_LOADS_SLOWDOWN)
    fast, slow = estimate(*args, H200), estimate(*args, H200, SCALAR_LOADS_SLOWDOWN)
    assert slow.t_gemm == fast.t_gemm and slow.t_comm == fast.t_comm
    assert slow.t_overlap > SCALAR_LOADS_SLOWDOWN * fast.t_gemm > fast.t_overlap


def test_the_slowdowns_follow_the_measurements():
    assert gemm_slowdown(2, False) == 1.0
    assert gemm_slowdown(2, True) == SCALAR_LOADS_SLOWDOWN
    assert gemm_slowdown(4, False) == FP32_SLOWDOWN
    assert gemm_slowdown(4, True) == max(FP32_SLOWDOWN, SCALAR_LOADS_SLOWDOWN)
    # fp32's T_gemm is cuBLAS's IEEE fp32 rate, not the tensor cores'
    e = estimate("gemm_rs", 8192, 4096, 4096, 2, 4, H200)
    assert abs(e.t_gemm - 2 * 8192 * 4096 * 4096 / H200.fp32_flops) < 1e-9


def test_hopper_variants_take_their_own_figures():
    """An H800's NVLink carries less than half an H200's (it had the H200's figures), an
    H100's HBM less; names the model does not know get the generic GPU."""
    from ditron.tune.cost_model import GENERIC_GPU, H100, H800, spec_for

    assert spec_for("NVIDIA H200") is H200 and spec_for("NVIDIA H100 80GB HBM3") is H100
    assert spec_for("NVIDIA H800") is H800 and spec_for("NVIDIA L4") is GENERIC_GPU
    assert H800.link_bw < H200.link_bw / 2 and H100.link_bw == H200.link_bw
    assert H100.mem_bw < H200.mem_bw and H100.peak_flops == H200.peak_flops
    args = ("ag_gemm", 8192, 14336, 8192, 2, 2)
    assert estimate(*args, H800).t_comm > 2 * estimate(*args, H200).t_comm - H200.latency


def test_estimate_refuses_what_it_cannot_model():
    """A world of 0 ranks divided by zero, and negative sizes gave negative GEMM times;
    both are refused by name, as an unknown op was (before any arithmetic now)."""
    import pytest

    with pytest.raises(ValueError, match="estimate: world_size must be a positive int, got 0"):
        estimate("ag_gemm", 8, 8, 8, 0, 2, H200)
    with pytest.raises(ValueError, match="estimate: M must be an int >= 0, got -8"):
        estimate("gemm_rs", -8, 8, 8, 2, 2, H200)
    with pytest.raises(ValueError, match="estimate: itemsize must be a positive int, got 0"):
        estimate("gemm_ar", 8, 8, 8, 2, 0, H200)
    with pytest.raises(ValueError, match="unknown op 'matmul'"):
        estimate("matmul", 8, 8, 8, 2, 2, H200)
    zero = estimate("gemm_rs", 0, 0, 0, 2, 2, H200)  # zero sizes: latency and host time only
    assert zero.t_gemm == 0 and zero.t_comm == H200.latency and not zero.pays
