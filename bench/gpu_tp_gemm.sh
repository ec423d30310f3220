#!/usr/bin/env bash
# GPU checks for issue 4 (overlapped TP GEMMs). Run from the repository root on the GPU
# machine (python3 with torch 2.11 / triton 3.6). Outputs under ${OUT:-bench/results}.
# Budget: under 8 minutes in total (each step is bounded with `timeout`).
set -u
cd "$(dirname "$0")/.."
export PYTHONPATH=$PWD
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
OUT=${OUT:-bench/results}
mkdir -p "$OUT"
export DITRON_CACHE_DIR=${DITRON_CACHE_DIR:-$OUT/cache}
status=0

echo "== (1) single GPU: persistent GEMM (pointer and TMA loads) vs cuBLAS; consumer GEMM =="
timeout 120 python3 - <<'PY' 2>&1 | tee "$OUT/gemm_single.txt" || status=1
import json, os, statistics, torch, triton
import ditron
from ditron.kernels.gemm import (GemmHooks, cached_linear_order, default_config, launch_gemm,
                                 tma_operands)

def bench(fn, iters=30, warmup=5):
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    ts = []
    for _ in range(iters):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record(); fn(); e.record(); e.synchronize(); ts.append(s.elapsed_time(e) * 1e3)
    return statistics.median(ts)

ditron.init("cuda")
rows = []
# per-rank shapes of REFERENCES.md at world size 8 (M = 8192): AG N/8 and RS K/8
shapes = [(8192, 1376, 4096), (8192, 3584, 8192), (8192, 6656, 16384),
          (8192, 4096, 1376), (8192, 8192, 3584)]
cfg = default_config(torch.device("cuda"))
for M, N, K in shapes:
    a = torch.randn(M, K, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(N, K, device="cuda", dtype=torch.bfloat16).t()  # B in [N, K] layout
    assert tma_operands(a, b, cfg) is not None, "operands do not meet the TMA rules"
    ref = a.float() @ b.float()
    order = cached_linear_order(M, N, cfg, a.device)  # built once, outside the timing
    c = torch.empty(M, N, device="cuda", dtype=torch.bfloat16)
    row = dict(M=M, N=N, K=K, cfg=cfg.label(), cublas_us=bench(lambda: torch.matmul(a, b)))
    for name, tma in (("ptr", False), ("tma", True)):
        c.zero_()
        launch_gemm(a, b, c, M, order=order, seg_rows=M, cfg=cfg, use_tma=tma)
        row[f"{name}_err"] = ((c.float() - ref).abs().max() / ref.abs().max()).item()
        row[f"{name}_us"] = bench(lambda: launch_gemm(a, b, c, M, order=order, seg_rows=M,
                                                      cfg=cfg, use_tma=tma))
    # consumer GEMM (TMA): one wait per tile on chunk signals that have all arrived
    mb = triton.cdiv(M, cfg.block_m)
    sig = ditron.zeros(8, torch.int64); sig.fill_(1)
    lo = (torch.arange(mb, dtype=torch.int32, device="cuda") * cfg.block_m * 8 // M)
    hooks = GemmHooks(wait_lo=lo, wait_hi=lo.clone(), wait_sig=sig, wait_target=1)
    c.zero_()
    launch_gemm(a, b, c, M, order=order, seg_rows=M, cfg=cfg, hooks=hooks, use_tma=True)
    row["wait_err"] = ((c.float() - ref).abs().max() / ref.abs().max()).item()
    row["wait_tma_us"] = bench(lambda: launch_gemm(a, b, c, M, order=order, seg_rows=M,
                                                   cfg=cfg, hooks=hooks, use_tma=True))
    rows.append(row)
    print(json.dumps(row), flush=True)
json.dump(rows, open(os.path.join(os.environ.get("OUT", "bench/results"), "gemm_single.json"), "w"), indent=1)
print(f"\n{'M x N x K':<20}{'cuBLAS':>9}{'ptr':>9}{'TMA':>9}{'TMA+wait':>10}"
      f"{'ptr/cuB':>9}{'TMA/cuB':>9}{'wait':>8}{'max err':>9}   (us; speed vs cuBLAS)")
for r in rows:
    err = max(r["ptr_err"], r["tma_err"], r["wait_err"])
    print(f"{r['M']}x{r['N']}x{r['K']:<9}{r['cublas_us']:>9.0f}{r['ptr_us']:>9.0f}"
          f"{r['tma_us']:>9.0f}{r['wait_tma_us']:>10.0f}{r['cublas_us'] / r['ptr_us']:>8.2f}x"
          f"{r['cublas_us'] / r['tma_us']:>8.2f}x{r['wait_tma_us'] / r['tma_us'] - 1:>+8.1%}"
          f"{err:>9.1e}")
ditron.shutdown()
PY

echo "== (2) GPU-marked tests with 2 ranks, and the op tests on the cuda backend =="
timeout 150 python3 -m pytest -q -m gpu tests/ops/test_tp_gemm.py 2>&1 | tee "$OUT/tests_gpu.txt" | tail -5 || status=1
timeout 120 python3 -m pytest -q --ditron-backend cuda "tests/ops/test_tp_gemm.py::test_ops_match_torch[1]" "tests/ops/test_tp_gemm.py::test_ops_match_torch[2]" tests/ops/test_tp_gemm.py::test_bad_inputs_raise_before_any_kernel 2>&1 | tee "$OUT/tests_cuda_backend.txt" | tail -5 || status=1

echo "== (3) tp-gemm benchmark, world size 2 =="
NGPU=$(python3 -c "import torch; print(torch.cuda.device_count())")
if [ "$NGPU" -ge 2 ]; then
  timeout 240 python3 -m ditron bench tp-gemm --world-size 2 --warmup 5 --iters 20 --out "$OUT" 2>&1 | tee "$OUT/tp_gemm.txt" || status=1
else
  echo "only $NGPU GPU(s): benchmark at world size 2 needs 2 GPUs (NCCL refuses shared GPUs); skipped"
fi
exit $status
