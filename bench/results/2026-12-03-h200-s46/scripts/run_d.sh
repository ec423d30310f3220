#!/usr/bin/env bash
# s46d: the grouped GEMM's host cost per call, broken down; the forward's tile configs at
# 128 tokens (s46a added 128 x 128 and 64 x 256 pointer configs, fastest at 1024).
set -u
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 DITRON_LAUNCH_TIMEOUT=120
O=$OUT/s46d; mkdir -p $O
timeout 90 python bench/diag/grouped_gemm_host.py --out $O > $O/grouped_gemm_host_stdout.txt 2>&1
echo "rc=$?" >> $O/grouped_gemm_host_stdout.txt; head -14 $O/grouped_gemm_host_stdout.txt
timeout 150 python -m ditron bench moe --world-size 1 --parts gemm --sweep --tokens 128 \
  --out $O/gemm_sweep_128.json > $O/gemm_sweep_128.txt 2>&1
echo "rc=$?" >> $O/gemm_sweep_128.txt; tail -5 $O/gemm_sweep_128.txt
timeout 100 python -m pytest -v -p no:cacheprovider --ditron-backend cuda tests/ops/test_moe.py \
  tests/nn/test_moe.py -k "rows_per_group or mean_rows or matches_torch" > $O/rows_hint_tests.txt 2>&1
echo "rc=$?" >> $O/rows_hint_tests.txt; grep -E "passed|failed|rc=" $O/rows_hint_tests.txt | tail -2
