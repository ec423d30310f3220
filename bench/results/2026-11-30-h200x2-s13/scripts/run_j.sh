#!/bin/bash
# s13j: every GPU test on the final code of the session (2 H200s, one process each).
export PYTHONPATH=$PWD NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
R=$OUT/s13j; mkdir -p $R
git log -1 --format=%H > $R/commit.txt; git status --short >> $R/commit.txt
timeout 400 python3 -m pytest -m gpu tests/ -q -p no:cacheprovider > $R/gpu_tests.txt 2>&1
echo "tests rc=$?"; tail -4 $R/gpu_tests.txt
