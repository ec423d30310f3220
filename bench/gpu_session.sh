#!/usr/bin/env bash
# One call on a one-GPU machine: the foundation tests on the cuda backend (ranks share the
# GPU), then bench/gpu_tp_gemm.sh. Results under ${OUT:-bench/results}.
set -u
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export DITRON_LAUNCH_TIMEOUT=120
OUT=${OUT:-bench/results}
mkdir -p "$OUT/tp"
timeout 170 python3 -m pytest -q -p no:cacheprovider --ditron-backend cuda tests/language \
  tests/runtime/test_timeout.py "tests/runtime/test_launch.py::test_results_come_back_by_rank" \
  "tests/runtime/test_heap.py::test_symmetric_allocation_and_peer_views" \
  > "$OUT/foundation_tests_cuda.txt" 2>&1
tail -3 "$OUT/foundation_tests_cuda.txt"
OUT=$OUT/tp timeout 330 bash bench/gpu_tp_gemm.sh > "$OUT/tp/log.txt" 2>&1
tail -30 "$OUT/tp/log.txt"
