#!/usr/bin/env bash
# s34e: the GPU-marked tests outside the task level (ranks sharing the one H200), on the
# working tree of s34d: engines, TP GEMMs, out=/replays, fused collectives, collectives.
set -u
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
O=$OUT/s34e; mkdir -p $O
{ git log --oneline -1; git status --short; nvidia-smi -L; } > $O/commit.txt
for f in tests/engines tests/ops/test_tp_gemm.py tests/ops/test_out.py tests/ops/test_fused_collectives.py tests/ops/test_collectives.py; do
  echo "== $f" >> $O/gpu_tests.txt
  timeout 170 python -m pytest -v -p no:cacheprovider -m gpu $f 2>&1 | grep -E "PASSED|FAILED|ERROR|passed|failed" | sed 's/^tests/  tests/' >> $O/gpu_tests.txt
done
cat $O/gpu_tests.txt
