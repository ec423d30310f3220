#!/usr/bin/env bash
# s51d: more configs for 8192 x 1376 x 4096 (the local GEMM's one shape under 0.97x cuBLAS):
# K blocks of 128 in two stages (plain stores), and 128 programs (three tiles each) instead
# of one per SM; gemm_lab twice.
set -u
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
O=$OUT/s51d; mkdir -p $O
{ git log --oneline -1; git status --short; nvidia-smi -L; } > $O/commit.txt
for r in 1 2; do
  timeout 200 python bench/gemm_lab.py --shapes 8192x1376x4096 --out $O/lab$r \
    --configs 128x256x128/w8/s2/t0,128x256x64/w8/s3/p128,128x256x64/w8/s3/g4/p128,128x256x64/w8/s4/t0/p128 \
    > $O/gemm_lab$r.txt 2>&1; echo "rc=$?" >> $O/gemm_lab$r.txt
  grep -vE '^\{' $O/gemm_lab$r.txt | tail -22
done
