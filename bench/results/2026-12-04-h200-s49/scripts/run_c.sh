#!/usr/bin/env bash
# s49c: where the nn combine's forward + backward time goes at 1024 tokens (its ops alone
# take 264 + 218 + 318 us in s49b, the step 2460 us): host issue time and torch.profiler.
set -u
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 DITRON_LAUNCH_TIMEOUT=150
O=$OUT/s49c; mkdir -p $O
{ git log --oneline -1; git status --short; nvidia-smi -L; } > $O/commit.txt
timeout 120 python bench/diag/nn_combine_profile.py 1024 20 > $O/profile.txt 2>&1; echo "rc=$?" >> $O/profile.txt
head -4 $O/profile.txt; tail -1 $O/profile.txt
