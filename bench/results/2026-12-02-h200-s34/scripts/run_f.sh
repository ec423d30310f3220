#!/usr/bin/env bash
# s34f: the task level's GPU-marked tests on 37b0561 (MLP stacks built by add_tp_mlp_stack).
set -u
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
O=$OUT/s34f; mkdir -p $O
{ git log --oneline -1; git status --short; nvidia-smi -L; } > $O/commit.txt
timeout 140 python -m pytest -v -p no:cacheprovider -m gpu tests/task 2>&1 | grep -E "PASSED|FAILED|ERROR|passed|failed" > $O/gpu_tests.txt
cat $O/gpu_tests.txt
