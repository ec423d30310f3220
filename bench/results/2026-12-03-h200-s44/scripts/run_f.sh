#!/usr/bin/env bash
# s44f (not run in session 44: its device time was spent): the grouped GEMMs launched
# through FastKernel (after s44e): their GPU tests, the layer's gradients at W = 2, the
# inductor compile test, and the host time of the eager layer's ops (s44d: grouped GEMMs
# 106 us each through JITFunction.run).
set -u
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 DITRON_LAUNCH_TIMEOUT=120
O=$OUT/s44f; mkdir -p $O
timeout 70 python -m pytest -v -p no:cacheprovider --ditron-backend cuda tests/ops/test_moe.py \
  -k "grouped_gemm or cuda_graph" > $O/moe_tests.txt 2>&1
echo "rc=$?" >> $O/moe_tests.txt; grep -E "passed|failed|rc=" $O/moe_tests.txt | tail -3
timeout 150 python -m pytest -v -p no:cacheprovider --ditron-backend cuda tests/nn/test_moe.py \
  -k "inductor or matches_torch and 2" > $O/nn_moe.txt 2>&1
echo "rc=$?" >> $O/nn_moe.txt; grep -E "passed|failed|rc=" $O/nn_moe.txt | tail -3
timeout 60 python bench/diag/moe_host_profile.py cuda 128 30 > $O/host_profile.txt 2>&1
echo "rc=$?" >> $O/host_profile.txt; grep -A5 "host issue" $O/host_profile.txt
timeout 120 python -m ditron bench moe --world-size 1 --parts gemm,layer --layer-tokens 128,1024 \
  --out $O/moe.json > $O/moe.txt 2>&1
echo "rc=$?" >> $O/moe.txt; tail -8 $O/moe.txt
