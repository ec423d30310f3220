#!/bin/bash
# one H200 shared by two ranks (gloo host group): the replayed and direct paths, the collectives' GPU tests
export PYTHONPATH=$PWD NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
O=$OUT/s22j; mkdir -p $O
git log --oneline -1 > $O/commit.txt; git status --short >> $O/commit.txt; nvidia-smi -L >> $O/commit.txt
timeout 270 python3 -m pytest -q -m gpu tests/ops/test_out.py tests/ops/test_collectives.py > $O/gpu_tests.txt 2>&1; echo "rc=$?" >> $O/gpu_tests.txt
tail -4 $O/gpu_tests.txt
