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

echo "== (1) single GPU: persistent GEMM vs cuBLAS; consumer GEMM with chunks arrived =="
timeout 180 python3 - <<'PY' 2>&1 | tee "$OUT/gemm_single.txt" || status=1
import json, os, statistics, torch, triton
import ditron
from ditron.kernels.gemm import GemmConfig, GemmHooks, default_config, launch_gemm, matmul
from ditron.kernels.swizzle import linear_order

def bench(fn, iters=30, warmup=5):
    for _ in range(warmup):
        fn()
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
cfgs = [default_config(torch.device("cuda")), GemmConfig(128, 128, 64, 8, 4, 4)]
for M, N, K in shapes:
    a = torch.randn(M, K, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(N, K, device="cuda", dtype=torch.bfloat16).t()  # B in [N, K] layout
    ref = a.float() @ b.float()
    t_cublas = bench(lambda: torch.matmul(a, b))
    for cfg in cfgs:
        c = matmul(a, b, cfg)
        err = ((c.float() - ref).abs().max() / ref.abs().max()).item()
        t = bench(lambda: matmul(a, b, cfg))
        # consumer GEMM: one wait per tile on chunk signals that have all arrived
        order = linear_order(triton.cdiv(M, cfg.block_m), triton.cdiv(N, cfg.block_n),
                             cfg.group_m).cuda()
        mb = triton.cdiv(M, cfg.block_m)
        sig = ditron.zeros(8, torch.int64); sig.fill_(1)
        lo = (torch.arange(mb, dtype=torch.int32, device="cuda") * cfg.block_m * 8 // M)
        hooks = GemmHooks(wait_lo=lo, wait_hi=lo.clone(), wait_sig=sig, wait_target=1)
        out = torch.empty(M, N, device="cuda", dtype=torch.bfloat16)
        t_wait = bench(lambda: launch_gemm(a, b, out, M, order=order, seg_rows=M, cfg=cfg,
                                           hooks=hooks))
        row = dict(M=M, N=N, K=K, cfg=cfg.label(), cublas_us=t_cublas, triton_us=t,
                   vs_cublas=t_cublas / t, consumer_us=t_wait, wait_cost=t_wait / t - 1,
                   rel_err=err)
        rows.append(row)
        print(json.dumps(row))
json.dump(rows, open(os.path.join(os.environ.get("OUT", "bench/results"), "gemm_single.json"), "w"), indent=1)
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
