#!/usr/bin/env bash
# s32e: the megakernel's own-rank notifies at GPU scope, on the cuda backend: the megakernel
# tests (1-4 ranks sharing the GPU: their peers' notifies stay at system scope). One H200.
set -u
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 DITRON_LAUNCH_TIMEOUT=200
O=$OUT/s32e; mkdir -p $O
{ git log --oneline -1; git status --short; nvidia-smi -L; } > $O/commit.txt
pip install --quiet --no-deps -e . > /dev/null 2>&1
timeout 190 python -m pytest -q -p no:cacheprovider --ditron-backend cuda tests/task/test_megakernel.py 2>&1 | tail -4 > $O/cuda_tests.txt
cat $O/cuda_tests.txt
