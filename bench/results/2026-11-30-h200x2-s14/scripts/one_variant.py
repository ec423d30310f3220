"""Run one EPILOGUE 3 variant once (a debugging aid): python one_variant.py CONFIG [N K]."""
from __future__ import annotations

import sys

import torch

import ditron
from ditron.kernels import gemm as G
from ditron.kernels.swizzle import scatter_order

sys.path.insert(0, __import__("os").path.dirname(__file__))
from rs_pieces import CONFIGS  # noqa: E402


def main() -> None:
    ditron.init("cuda")
    name = sys.argv[1]
    N, K = (int(sys.argv[2]), int(sys.argv[3])) if len(sys.argv) > 3 else (4096, 5504)
    M, half, dev = 8192, 4096, torch.device("cuda")
    cfg = CONFIGS[name]
    a = torch.randn(M, K, device=dev, dtype=torch.bfloat16)
    b = torch.randn(N, K, device=dev, dtype=torch.bfloat16).t()
    out = torch.zeros(half, N, device=dev, dtype=torch.bfloat16)
    recv = torch.zeros(2, half, N, device=dev, dtype=torch.bfloat16)
    bps = half // cfg.block_m
    order = scatter_order([mb // bps for mb in range(2 * bps)], -(-N // cfg.block_n), 0, 2,
                          8).to(dev)
    hooks = G.GemmHooks(epilogue=G.EPI_ACCUMULATE, recv=recv)
    st = G._static_launch(a, b, out, M, half, order.numel(), cfg, hooks, None)
    print(name, "grid", st[0], "tma_b", st[3], "c_tma", st[4], flush=True)
    G.launch_gemm(a, b, out, M, order=order, seg_rows=half, cfg=cfg, hooks=hooks)
    torch.cuda.synchronize()
    ref = a.float() @ b.float()
    got = torch.cat([out.float(), recv[1].float()])
    print(name, "rel err", ((got - ref).norm() / ref.norm()).item(), flush=True)


if __name__ == "__main__":
    main()
