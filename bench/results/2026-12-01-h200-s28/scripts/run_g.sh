#!/usr/bin/env bash
# s28g: the reduce-overhead test of ditron.nn (2 ranks sharing the GPU)
set -u
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export DITRON_LAUNCH_TIMEOUT=120
O=$OUT/s28g; mkdir -p $O
{ git log --oneline -1; git status --short; nvidia-smi -L; } > $O/commit.txt 2>&1
timeout 200 python3 -m pytest -v -p no:cacheprovider -m gpu tests/nn -k reduce_overhead > $O/test.txt 2>&1
tail -4 $O/test.txt
