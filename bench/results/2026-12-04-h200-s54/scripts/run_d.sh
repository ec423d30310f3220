#!/usr/bin/env bash
# s54d (prepared): session 54's fp32 tiles (128 x 128 x 32 GEMM, pointer loads for transposed
# fp32 operands) against the ones before and torch; on cuda the tests of the changed paths.
set -u
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 DITRON_LAUNCH_TIMEOUT=150
O=$OUT/s54d; mkdir -p $O
S=bench/results/2026-12-04-h200-s54/scripts
{ git log --oneline -1; git status --short; nvidia-smi -L; } > $O/commit.txt
timeout 240 python $S/fp32_ab.py > $O/fp32.txt 2>&1; echo "rc=$?" >> $O/fp32.txt; cat $O/fp32.txt
T="python -m pytest -q -p no:cacheprovider --ditron-backend cuda"
timeout 200 $T tests/task/test_megakernel.py tests/ops/test_moe.py -k "descriptors or gpu_default or tma_path or wgrad" > $O/tests.txt 2>&1; echo "rc=$?" >> $O/tests.txt; tail -n 3 $O/tests.txt
timeout 200 $T tests/ops/test_tp_gemm.py -k "ops_match_torch or ops_two_ranks_gpu or local_persistent" > $O/tp_tests.txt 2>&1; echo "rc=$?" >> $O/tp_tests.txt; tail -n 3 $O/tp_tests.txt
