#!/usr/bin/env bash
# s46b: the device all-to-all's two-rank GPU tests (cut by s46a's time limit), the wgrad
# tests and timings with the new default (TMA, 4 stages), the nn MoE gradients.
set -u
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 DITRON_LAUNCH_TIMEOUT=120
O=$OUT/s46b; mkdir -p $O
timeout 150 python -m pytest -v -p no:cacheprovider --ditron-backend cuda tests/ops/test_collectives.py \
  -k "all_to_all_device_cuda or a2a_device_graph" > $O/a2a_tests.txt 2>&1
echo "rc=$?" >> $O/a2a_tests.txt; grep -E "passed|failed|rc=" $O/a2a_tests.txt | tail -2
timeout 60 python -m pytest -v -p no:cacheprovider --ditron-backend cuda tests/ops/test_moe.py \
  -k "wgrad" > $O/wgrad_tests.txt 2>&1
echo "rc=$?" >> $O/wgrad_tests.txt; grep -E "passed|failed|rc=" $O/wgrad_tests.txt | tail -2
timeout 90 python -m ditron bench moe --world-size 1 --parts wgrad --tokens 8192 \
  --out $O/wgrad_8192.json > $O/wgrad_8192.txt 2>&1
echo "rc=$?" >> $O/wgrad_8192.txt; tail -5 $O/wgrad_8192.txt
timeout 150 python -m pytest -v -p no:cacheprovider --ditron-backend cuda tests/nn/test_moe.py \
  > $O/nn_moe_tests.txt 2>&1
echo "rc=$?" >> $O/nn_moe_tests.txt; grep -E "passed|failed|rc=" $O/nn_moe_tests.txt | tail -2
