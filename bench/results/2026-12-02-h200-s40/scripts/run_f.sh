#!/usr/bin/env bash
# s40f: reduce_scatter / all_reduce with op= (sum, avg, max, min) on the cuda backend
# (W = 1-4 sharing the H200; copy engine and the fused SM kernels; NaN propagation).
set -u
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 DITRON_LAUNCH_TIMEOUT=120
O=$OUT/s40f; mkdir -p $O
git log --oneline -1 > $O/commit.txt
timeout 280 python -m pytest -v -p no:cacheprovider --ditron-backend cuda tests/ops/test_reductions.py \
  -k "match_torch or nan" > $O/pytest_cuda.txt 2>&1; echo "rc=$?" >> $O/pytest_cuda.txt
grep -E "PASS|FAIL|ERROR|Error|passed|failed|rc=" $O/pytest_cuda.txt | tail -12
