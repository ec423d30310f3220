#!/usr/bin/env bash
# s40b: the dtype tests on the cuda backend after widening (W = 1-4 sharing the H200), the
# GPU-marked fused-collective tests, and the fused kernels' device time per dtype at equal
# bytes in a world of one rank (bench/dtype_cost.py: no peer shares the GPU).
set -u
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 DITRON_LAUNCH_TIMEOUT=150
O=$OUT/s40b; mkdir -p $O
{ git log --oneline -1; git status --short; nvidia-smi -L; } > $O/commit.txt
timeout 150 python bench/dtype_cost.py --sizes 1M,16M,64M --json $O/dtype_cost.json \
  > $O/dtype_cost.txt 2>&1; echo "rc=$?" >> $O/dtype_cost.txt
cat $O/dtype_cost.txt
timeout 260 python -m pytest -v -p no:cacheprovider --ditron-backend cuda tests/ops/test_dtypes.py \
  > $O/pytest_cuda.txt 2>&1; echo "rc=$?" >> $O/pytest_cuda.txt
grep -E "FAIL|ERROR|Error|passed|failed|rc=" $O/pytest_cuda.txt | tail -15
timeout 150 python -m pytest -v -p no:cacheprovider -m gpu tests/ops/test_fused_collectives.py \
  > $O/pytest_gpu.txt 2>&1; echo "rc=$?" >> $O/pytest_gpu.txt
grep -E "FAIL|ERROR|passed|failed|rc=" $O/pytest_gpu.txt | tail -12
