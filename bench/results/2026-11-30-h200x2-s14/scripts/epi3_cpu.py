"""CPU check of EPILOGUE 3 (accumulate own rows, store peer rows into recv); needs
``pull_persistent_engine.patch``. With ``DITRON_GEMM_TMA=1 DITRON_RECORD_LAUNCHES=DIR`` it
records the launch that ``probe.py DIR 3 <flatten 0|1> <stages>`` compiles for sm_90."""
from __future__ import annotations

import torch

import ditron
from ditron.kernels import gemm as G


def main() -> None:
    ditron.init("cpu")
    torch.manual_seed(0)
    seg, N, K = 160, 48, 40
    M = 2 * seg
    a = torch.randn(M, K)
    b = torch.randn(N, K).t()
    cfg = G.GemmConfig(block_m=32, block_n=32, block_k=16, num_warps=4, num_stages=2,
                       flatten=True, tma_store=True)
    full = a @ b
    addend = torch.randn(seg, N)
    out = addend.clone()
    recv = torch.full((2, seg, N), float("nan"))
    from ditron.kernels.swizzle import scatter_order
    bps = -(-seg // cfg.block_m)
    seg_of_block = [mb // bps for mb in range(2 * bps)]
    nb = -(-N // cfg.block_n)
    order = scatter_order(seg_of_block, nb, 0, 2)
    hooks = G.GemmHooks(epilogue=G.EPI_ACCUMULATE, recv=recv)
    # two launches over ranges of the order, as the engine would
    cut = len(order) // 3
    for lo, hi in ((0, cut), (cut, len(order))):
        G.launch_gemm(a, b, out, M, order=order[lo:hi], seg_rows=seg, cfg=cfg, hooks=hooks)
    err_own = (out - (full[:seg] + addend)).abs().max().item()
    err_peer = (recv[1] - full[seg:]).abs().max().item()
    print("own", err_own, "peer", err_peer, "slot0 untouched", torch.isnan(recv[0]).all().item())
    assert err_own < 1e-4 and err_peer < 1e-4


if __name__ == "__main__":
    main()
