#!/usr/bin/env bash
# One call on a one-GPU machine: every GPU-marked test (2 ranks sharing the GPU) and the
# collectives / fused all-reduce / TP-GEMM tests on the cuda backend. Logs under ${OUT}.
set -u
cd "$(dirname "$0")/.."
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export DITRON_LAUNCH_TIMEOUT=120
OUT=${OUT:-bench/results}
mkdir -p "$OUT"
# one line per test (-v), so a run cut short by its limit still says what passed
timeout 420 python3 -m pytest -v -p no:cacheprovider -m gpu tests/ > "$OUT/gpu_marked_tests.txt" 2>&1
tail -4 "$OUT/gpu_marked_tests.txt"
timeout 160 python3 -m pytest -v -p no:cacheprovider --ditron-backend cuda \
  "tests/ops/test_fused_collectives.py::test_fused_collectives_match_torch[2-push]" \
  "tests/ops/test_fused_collectives.py::test_fused_collectives_survive_replayed_launches[push-3]" \
  "tests/runtime/test_launch.py::test_launch_timeout_names_stuck_ranks" \
  > "$OUT/cuda_backend_tests.txt" 2>&1
tail -4 "$OUT/cuda_backend_tests.txt"
