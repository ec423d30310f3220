#!/usr/bin/env bash
# s44d: grouped_gemm "auto" = Ditron's kernel (3 stages): GPU tests of the grouped GEMM and
# the layer's CUDA graph; the inductor compile test alone (cut by the caps of s44a/c after
# the other tests); torch.profiler's host time of the eager dispatch and combine.
set -u
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 DITRON_LAUNCH_TIMEOUT=120
O=$OUT/s44d; mkdir -p $O
timeout 70 python -m pytest -v -p no:cacheprovider --ditron-backend cuda tests/ops/test_moe.py \
  -k "grouped_gemm or cuda_graph" > $O/moe_tests.txt 2>&1
echo "rc=$?" >> $O/moe_tests.txt; grep -E "passed|failed|rc=" $O/moe_tests.txt | tail -3
timeout 150 python -m pytest -v -p no:cacheprovider --durations=0 --ditron-backend cuda \
  tests/nn/test_moe.py -k inductor > $O/nn_inductor.txt 2>&1
echo "rc=$?" >> $O/nn_inductor.txt; grep -E "PASS|FAIL|passed|failed|rc=|^[0-9.]+s call" $O/nn_inductor.txt | tail -4
timeout 60 python bench/diag/moe_host_profile.py cuda 128 30 > $O/host_profile.txt 2>&1
echo "rc=$?" >> $O/host_profile.txt; head -6 $O/host_profile.txt
