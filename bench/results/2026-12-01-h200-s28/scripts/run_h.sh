#!/usr/bin/env bash
# s28h: bench/tp_mlp.py runs on the CUDA backend (one GPU, world size 1: both variants are
# local GEMMs there; a check of the script before a two-GPU run, not a comparison)
set -u
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
O=$OUT/s28h; mkdir -p $O
{ git log --oneline -1; git status --short; nvidia-smi -L; } > $O/commit.txt 2>&1
timeout 200 python3 bench/tp_mlp.py --world-size 1 --out $O/tp_mlp_w1.json 2>&1 | grep -v Warning | tee $O/tp_mlp.txt
