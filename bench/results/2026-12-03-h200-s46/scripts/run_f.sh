#!/usr/bin/env bash
# s46f: the weight gradient's tiles of dw in grouped order (group_m K tiles sweep the N
# tiles together): its tests on cuda, and the sweep over the band (1024 = the old order).
set -u
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 DITRON_LAUNCH_TIMEOUT=120
O=$OUT/s46f; mkdir -p $O
timeout 60 python -m pytest -v -p no:cacheprovider --ditron-backend cuda tests/ops/test_moe.py \
  -k "wgrad" > $O/wgrad_tests.txt 2>&1
echo "rc=$?" >> $O/wgrad_tests.txt; grep -E "passed|failed|rc=" $O/wgrad_tests.txt | tail -2
timeout 150 python -m ditron bench moe --world-size 1 --parts wgrad --sweep --tokens 8192 \
  --out $O/wgrad_sweep_8192.json > $O/wgrad_sweep_8192.txt 2>&1
echo "rc=$?" >> $O/wgrad_sweep_8192.txt; tail -5 $O/wgrad_sweep_8192.txt
