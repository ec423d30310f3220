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

echo "== (1) single GPU: persistent GEMM variants vs cuBLAS (bench/gemm_lab.py), launch cost =="
timeout 300 python3 bench/gemm_lab.py --out "$OUT" 2>&1 | grep -v '^{' | tee "$OUT/gemm_lab.txt" || status=1
timeout 120 python3 bench/gemm_launch_cost.py --out "$OUT" 2>&1 | head -12 || status=1

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
