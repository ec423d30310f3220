from __future__ import annotations

from ditron.tune.cost_model import H200, estimate, overlap_pays


def test_small_gemm_rs_regression_falls_back():
    # REFERENCES.md: GEMM-RS M=4096 N=4096 K=8192 was 93% slower overlapped than torch.
    assert not overlap_pays("gemm_rs", 4096, 4096, 8192 // 8, 8, 2, "cuda", "NVIDIA H200")


def test_estimate_follows_the_roofline():
    e = estimate("ag_gemm", 8192, 14336, 8192, 2, 2, H200)
    assert abs(e.t_gemm - 2 * 8192 * 14336 * 8192 / H200.peak_flops) < 1e-9
    # all_gather moves (W-1)/W of the gathered A per rank
    assert abs(e.t_comm - (8192 * 8192 * 2 / 2 / H200.link_bw + H200.latency)) < 1e-9
    assert e.t_overlap >= max(e.t_gemm, e.t_comm)
