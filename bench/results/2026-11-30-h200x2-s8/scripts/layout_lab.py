"""Lab (session 8): cuBLAS time of the TP GEMMs' local products with b contiguous [K, N]
(what the tuner timed until session 8) against b = weight.t() of a [N, K] weight (what the
benchmark and models pass). One GPU, CUDA events, median of 20 after 5 warm-up calls."""
import statistics

import torch


def bench(fn, warm=5, iters=20):
    for _ in range(warm):
        fn()
    ts = []
    for _ in range(iters):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        fn()
        e.record()
        e.synchronize()
        ts.append(s.elapsed_time(e) * 1e3)
    return statistics.median(ts)


for M, K, N in [(8192, 14336, 8192), (8192, 14784, 8192), (8192, 18432, 4608),
                (8192, 5504, 4096), (8192, 4096, 14784), (8192, 8192, 14784)]:
    a = torch.randn(M, K, device="cuda", dtype=torch.bfloat16)
    b_kn = torch.randn(K, N, device="cuda", dtype=torch.bfloat16)
    b_t = torch.randn(N, K, device="cuda", dtype=torch.bfloat16).t()
    t1 = bench(lambda a=a, b=b_kn: a @ b)
    t2 = bench(lambda a=a, b=b_t: a @ b)
    print(f"M={M} K={K} N={N}: b [K,N] contiguous {t1:8.1f} us   b = [N,K].t() {t2:8.1f} us"
          f"   ratio {t1 / t2:.3f}", flush=True)
