#!/bin/bash
# s23e: one H200 shared by two ranks: GPU tests of the engines, the TP GEMMs and the replays
export PYTHONPATH=$PWD NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export DITRON_LAUNCH_TIMEOUT=150
O=$OUT/s23e; mkdir -p $O
git log --oneline -1 > $O/commit.txt; git status --short >> $O/commit.txt
timeout 500 python3 -m pytest -q -p no:cacheprovider -m gpu tests/engines tests/ops/test_tp_gemm.py tests/ops/test_out.py > $O/gpu_tests.txt 2>&1
echo "rc=$?" >> $O/gpu_tests.txt
tail -5 $O/gpu_tests.txt
