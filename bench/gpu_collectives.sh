#!/usr/bin/env bash
# GPU check for ditron collectives and transfer engines (issue 3). Run from the repo root:
#   bash bench/gpu_collectives.sh            # results under ${OUT:-bench/results}
# Works on 1 H200 (2 ranks share it: no NCCL baseline) and on 2+ H200s (one rank each).
# Needs torch, triton, pytest; uses the checkout through PYTHONPATH (no pip install).
set -euo pipefail
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export DITRON_WAIT_TIMEOUT=${DITRON_WAIT_TIMEOUT:-60} DITRON_LAUNCH_TIMEOUT=${DITRON_LAUNCH_TIMEOUT:-240}
OUT=${OUT:-bench/results}
mkdir -p "$OUT/collectives"
NGPU=$(python3 -c 'import torch; print(torch.cuda.device_count())')
echo "== $NGPU GPU(s); results in $OUT/collectives"

# 1. GPU tests (2 ranks; they share the GPU when only one is visible)
timeout 240 python3 -m pytest -q -m gpu tests/ops/test_collectives.py tests/ops/test_out.py \
  tests/engines/test_engines.py \
  2>&1 | tee "$OUT/collectives/gpu_tests.log" || echo "GPU TESTS FAILED (see gpu_tests.log)"

# 2. benchmark: 2 ranks, bf16, 4 KB .. 256 MB (1 GB with FULL=1), every op and engine vs torch
SIZES=4K,8K,64K,256K,1M,4M,16M,64M,256M
[ "${FULL:-0}" = 1 ] && SIZES=$SIZES,1G
timeout 120 python3 -m ditron bench collectives --world-size 2 --sizes "$SIZES" \
  --warmup 3 --iters 10 --out "$OUT/collectives" 2>&1 | tee "$OUT/collectives/bench.log" \
  || echo "BENCHMARK FAILED OR TIMED OUT (see bench.log)"
