#!/usr/bin/env bash
# s44c: after s44a/b: ditron.nn's MoE traced on CUDA too (no graph breaks): its tests on
# the GPU; the grouped GEMM with 4 stages and a vector group lookup: GPU tests, the GEMM
# sweep, and the layer with each grouped-GEMM method at 128 / 1024 / 8192 tokens.
set -u
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 DITRON_LAUNCH_TIMEOUT=150
O=$OUT/s44c; mkdir -p $O
timeout 100 python -m pytest -v -p no:cacheprovider --ditron-backend cuda tests/ops/test_moe.py \
  -k "grouped_gemm" > $O/grouped_tests.txt 2>&1
echo "rc=$?" >> $O/grouped_tests.txt; grep -E "passed|failed|rc=" $O/grouped_tests.txt | tail -3
timeout 150 python -m ditron bench moe --world-size 1 --parts gemm --sweep --out $O/gemm_sweep.json \
  > $O/gemm_sweep.txt 2>&1
echo "rc=$?" >> $O/gemm_sweep.txt; tail -6 $O/gemm_sweep.txt
timeout 150 python -m ditron bench moe --world-size 1 --parts layer --layer-tokens 128,1024,8192 \
  --out $O/layer.json > $O/layer.txt 2>&1
echo "rc=$?" >> $O/layer.txt; tail -5 $O/layer.txt
timeout 180 python -m pytest -v -p no:cacheprovider --durations=0 --ditron-backend cuda \
  tests/nn/test_moe.py > $O/nn_moe.txt 2>&1
echo "rc=$?" >> $O/nn_moe.txt; grep -E "PASS|FAIL|ERROR|passed|failed|rc=|AssertionError: rank|^[0-9.]+s call" $O/nn_moe.txt | tail -24
timeout 90 python bench/diag/moe_host_profile.py cuda 128 50 > $O/host_profile.txt 2>&1
echo "rc=$?" >> $O/host_profile.txt; head -6 $O/host_profile.txt
