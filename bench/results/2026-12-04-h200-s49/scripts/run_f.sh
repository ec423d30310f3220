#!/usr/bin/env bash
# s49f: s49e again, with a cProfile of the direct send_tokens and copy_dots calls.
set -u
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 DITRON_LAUNCH_TIMEOUT=150
O=$OUT/s49f; mkdir -p $O
{ git log --oneline -1; git status --short; nvidia-smi -L; } > $O/commit.txt
timeout 120 python bench/diag/nn_combine_profile.py 1024 30 ops > $O/host.txt 2>&1; echo "rc=$?" >> $O/host.txt
head -6 $O/host.txt; grep -A50 "direct send_tokens" $O/host.txt | cut -c1-150 | head -60
