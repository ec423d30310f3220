#!/usr/bin/env bash
# s40e: after the 128 KB block cap: the fused kernels per dtype at equal bytes (one rank;
# each result checked), then the dtype and fused-collective tests on the cuda backend.
set -u
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 DITRON_LAUNCH_TIMEOUT=150
O=$OUT/s40e; mkdir -p $O
git log --oneline -1 > $O/commit.txt
timeout 120 python bench/dtype_cost.py --sizes 1M,16M,64M --json $O/dtype_cost.json \
  > $O/dtype_cost.txt 2>&1; echo "rc=$?" >> $O/dtype_cost.txt
cat $O/dtype_cost.txt
timeout 300 python -m pytest -v -p no:cacheprovider --ditron-backend cuda tests/ops/test_dtypes.py \
  > $O/pytest_cuda.txt 2>&1; echo "rc=$?" >> $O/pytest_cuda.txt
grep -E "FAIL|ERROR|Error|passed|failed|rc=" $O/pytest_cuda.txt | tail -8
timeout 120 python -m pytest -v -p no:cacheprovider -m gpu tests/ops/test_fused_collectives.py \
  > $O/pytest_gpu.txt 2>&1; echo "rc=$?" >> $O/pytest_gpu.txt
grep -E "FAIL|ERROR|passed|failed|rc=" $O/pytest_gpu.txt | tail -5
