#!/usr/bin/env bash
# s46e: the rows-per-group hint's tests (s46d's 100 s limit cut them after the first
# nn test's compiles), alone.
export PYTHONPATH=$PWD NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 DITRON_LAUNCH_TIMEOUT=120
O=$OUT/s46e; mkdir -p $O
timeout 200 python -m pytest -v -p no:cacheprovider --ditron-backend cuda tests/ops/test_moe.py \
  tests/nn/test_moe.py -k "rows_per_group or mean_rows or test_moe_matches" > $O/rows_hint_tests.txt 2>&1
echo "rc=$?" >> $O/rows_hint_tests.txt; grep -E "PASSED|FAILED|passed|failed|rc=" $O/rows_hint_tests.txt
