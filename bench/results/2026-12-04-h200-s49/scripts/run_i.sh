#!/usr/bin/env bash
# s49i: the merged bench/diag/nn_combine_profile.py runs both parts (step, ops) on cuda.
set -u
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 DITRON_LAUNCH_TIMEOUT=100
O=$OUT/s49i; mkdir -p $O
{ git log --oneline -1; git status --short; nvidia-smi -L; } > $O/commit.txt
for part in step ops; do
  timeout 60 python bench/diag/nn_combine_profile.py 1024 20 $part > $O/$part.txt 2>&1; echo "rc=$?" >> $O/$part.txt
  grep -E "^tokens|^  [a-z]|rc=" $O/$part.txt | head -8
done
