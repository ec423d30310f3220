#!/usr/bin/env bash
# s46a: GPU tests of 8417d01 (a2a workspace refactor) and of the weight gradient's TMA path
# (whole row blocks through descriptors, the partial one through pointers); the weight
# gradient's configs (sweep, 8192 tokens) and the forward's at 1024 tokens.
set -u
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 DITRON_LAUNCH_TIMEOUT=120
O=$OUT/s46a; mkdir -p $O
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv > $O/gpu.txt 2>&1
timeout 120 python -m pytest -v -p no:cacheprovider --ditron-backend cuda tests/ops/test_moe.py \
  -k "grouped_gemm or wgrad or cuda_graph" > $O/moe_tests.txt 2>&1
echo "rc=$?" >> $O/moe_tests.txt; grep -E "passed|failed|rc=" $O/moe_tests.txt | tail -2
timeout 120 python -m pytest -v -p no:cacheprovider --ditron-backend cuda tests/ops/test_collectives.py \
  -k "exchange or all_to_all_device or a2a_device" > $O/a2a_tests.txt 2>&1
echo "rc=$?" >> $O/a2a_tests.txt; grep -E "passed|failed|rc=" $O/a2a_tests.txt | tail -2
timeout 150 python -m ditron bench moe --world-size 1 --parts wgrad --sweep --tokens 8192 \
  --out $O/wgrad_sweep_8192.json > $O/wgrad_sweep_8192.txt 2>&1
echo "rc=$?" >> $O/wgrad_sweep_8192.txt; tail -5 $O/wgrad_sweep_8192.txt
timeout 150 python -m ditron bench moe --world-size 1 --parts gemm --sweep --tokens 1024 \
  --out $O/gemm_sweep_1024.json > $O/gemm_sweep_1024.txt 2>&1
echo "rc=$?" >> $O/gemm_sweep_1024.txt; tail -5 $O/gemm_sweep_1024.txt
