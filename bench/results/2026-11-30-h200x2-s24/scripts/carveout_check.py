"""Whether torch's SM carveout reaches the cuBLAS kernels here: time one GEMM piece of
GEMM-RS 4608 x 36864 (2048 x 4608 x 18432, bf16) and of 4096 x 11008 (2048 x 4096 x 5504)
with 0, 1 and 66 SMs carved out, with cuBLAS and with cuBLASLt preferred."""
import torch

for m, n, k in ((2048, 4608, 18432), (2048, 4096, 5504)):
    a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(n, k, device="cuda", dtype=torch.bfloat16).t()
    for lib in ("cublas", "cublaslt"):
        torch.backends.cuda.preferred_blas_library(lib)
        for carve in (None, 1, 2, 66):
            torch._C._set_sm_carveout_experimental(carve)
            for _ in range(5):
                a @ b
            ts = []
            for _ in range(20):
                s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                s.record()
                a @ b
                e.record()
                torch.cuda.synchronize()
                ts.append(s.elapsed_time(e) * 1000)
            print(f"{m}x{n}x{k} {lib} carveout {carve}: median {sorted(ts)[10]:.1f} us")
