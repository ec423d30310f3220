#!/usr/bin/env bash
# s50e: more tile configs for the one per-rank shape below 0.97x cuBLAS (8192 x 1376 x 4096:
# 1376 columns fill 6 tiles of 256), twice.
set -u
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
O=$OUT/s50e; mkdir -p $O
{ git log --oneline -1; git status --short; nvidia-smi -L; } > $O/commit.txt
C=128x128x64/w8/s4,128x128x64/w8/s5,128x128x128/w8/s3,128x128x128/w4/s3,64x256x64/w4/s4,128x256x64/w8/s3/g4,128x256x64/w8/s3/g16,128x256x64/w8/s4/t0,256x128x64/w8/s3/g4
for r in 1 2; do
  timeout 250 python bench/gemm_lab.py --shapes 8192x1376x4096 --configs $C --out $O/lab$r > $O/gemm_lab$r.txt 2>&1
  echo "rc=$?" >> $O/gemm_lab$r.txt; grep -v '^{' $O/gemm_lab$r.txt | tail -25
done
