"""Host cost of one persistent-GEMM launch on the GPU, by step, and a cProfile of it.

    python bench/results/2026-11-30-h200x2-s13/scripts/launch_profile.py
"""

from __future__ import annotations

import cProfile
import io
import pstats
import time

import torch
from triton.tools.tensor_descriptor import TensorDescriptor

import ditron
from ditron.kernels import gemm as G


def per_call(fn, n: int = 400) -> float:
    for _ in range(20):
        fn()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(n):
        fn()
    t = (time.perf_counter() - t0) * 1e6 / n
    torch.cuda.synchronize()
    return t


def main() -> None:
    ditron.init("cuda")
    M, N, K = 512, 4096, 1024  # small: the GPU keeps up, so host time is what is measured
    a = torch.randn(M, K, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(N, K, device="cuda", dtype=torch.bfloat16).t()
    c = torch.empty(M, N, device="cuda", dtype=torch.bfloat16)
    for name, cfg in (("t256 flat tstore", G.GemmConfig(flatten=True, tma_store=True)),
                      ("t256 plain store", G.GemmConfig(flatten=True)),
                      ("t256 pointer path", None)):
        cfg = cfg or G.GemmConfig(flatten=True)
        tma = name != "t256 pointer path"
        order = G.cached_linear_order(M, N, cfg, a.device)

        def launch(cfg=cfg, order=order, tma=tma):
            G.launch_gemm(a, b, c, M, order=order, seg_rows=M, cfg=cfg, use_tma=tma)

        def prepare(cfg=cfg, order=order, tma=tma):
            G.gemm_launch(a, b, c, M, order=order, seg_rows=M, cfg=cfg, use_tma=tma)

        print(f"{name}: launch_gemm {per_call(launch):6.1f} us, gemm_launch (no launch) "
              f"{per_call(prepare):6.1f} us", flush=True)
    w = b.t()
    desc = per_call(lambda: TensorDescriptor(w, [N, K], [K, 1], [256, 64]))
    print(f"TensorDescriptor(...) {desc:6.1f} us")
    print(f"torch.matmul {per_call(lambda: torch.matmul(a, b, out=c)):6.1f} us")
    cfg = G.GemmConfig(flatten=True, tma_store=True)
    order = G.cached_linear_order(M, N, cfg, a.device)
    grid, args, kwargs = G.gemm_launch(a, b, c, M, order=order, seg_rows=M, cfg=cfg)
    fast = per_call(lambda: G._GEMM[grid](*args, **kwargs))
    print(f"FastKernel launch of prepared args {fast:6.1f} us")
    from ditron.runtime import triton_launch as TL
    key_args = (args, G._GEMM._specialize)
    print(f"FastKernel key only {per_call(lambda: tuple(map(TL._arg_key, *key_args))):6.1f} us")
    prof = cProfile.Profile()
    prof.enable()
    for _ in range(300):
        G.launch_gemm(a, b, c, M, order=order, seg_rows=M, cfg=cfg)
    prof.disable()
    torch.cuda.synchronize()
    s = io.StringIO()
    pstats.Stats(prof, stream=s).sort_stats("tottime").print_stats(30)
    print(s.getvalue())


if __name__ == "__main__":
    main()
