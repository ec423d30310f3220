#!/usr/bin/env bash
# s54b: the GPU-marked tests, first part (engines, ditron.nn, collectives), durations kept.
set -u
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
O=$OUT/s54b; mkdir -p $O
{ git log --oneline -1; git status --short; nvidia-smi -L; } > $O/commit.txt
timeout 560 python -m pytest -v -p no:cacheprovider --durations=0 -m gpu tests/engines tests/nn tests/ops/test_collectives.py > $O/gpu_tests.txt 2>&1; echo "rc=$?" >> $O/gpu_tests.txt
grep -E "PASSED|FAILED|ERROR|passed|failed|rc=" $O/gpu_tests.txt | tail -n 30
