#!/usr/bin/env bash
# s40a: collectives on every dtype (runtime/dtypes.py): the dtype tests on the cuda backend
# (W = 1-4 sharing the H200; TMA engine at W = 2), the GPU-marked collective tests, then the
# device time per dtype at equal bytes (bench/dtype_cost.py, 2 ranks sharing the H200).
set -u
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 DITRON_LAUNCH_TIMEOUT=150
O=$OUT/s40a; mkdir -p $O
{ git log --oneline -1; git status --short; nvidia-smi -L; } > $O/commit.txt
timeout 240 python -m pytest -v -p no:cacheprovider --ditron-backend cuda tests/ops/test_dtypes.py \
  > $O/pytest_cuda.txt 2>&1; echo "rc=$?" >> $O/pytest_cuda.txt
grep -E "FAIL|ERROR|Error|passed|failed|rc=" $O/pytest_cuda.txt | tail -15
timeout 200 python -m pytest -v -p no:cacheprovider -m gpu tests/ops/test_collectives.py \
  > $O/pytest_gpu.txt 2>&1; echo "rc=$?" >> $O/pytest_gpu.txt
grep -E "FAIL|ERROR|passed|failed|rc=" $O/pytest_gpu.txt | tail -12
timeout 120 python bench/dtype_cost.py --world-size 2 --sizes 1M,16M --json $O/dtype_cost.json \
  > $O/dtype_cost.txt 2>&1; echo "rc=$?" >> $O/dtype_cost.txt
cat $O/dtype_cost.txt
