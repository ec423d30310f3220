#!/usr/bin/env bash
# s46g: the kernels' and the MoE ops' tests on cuda after the host grid arithmetic change
# (runtime/grid_math.py) and the weight gradient's grouped order.
export PYTHONPATH=$PWD NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 DITRON_LAUNCH_TIMEOUT=120
O=$OUT/s46g; mkdir -p $O
timeout 200 python -m pytest -v -p no:cacheprovider --ditron-backend cuda tests/kernels \
  tests/ops/test_moe.py tests/runtime/test_grid_math.py -x > $O/tests.txt 2>&1
echo "rc=$?" >> $O/tests.txt; grep -E "FAILED|passed|failed|rc=" $O/tests.txt | tail -3
