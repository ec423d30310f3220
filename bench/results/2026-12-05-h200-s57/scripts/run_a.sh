#!/usr/bin/env bash
# s57a: the stream-K tail in the GEMM lab (lab sk*), beside the default and the yardsticks,
# on the five per-rank shapes; then session 56's prepared fp32 run (next_a.sh, as s57a too).
set -u
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
O=$OUT/s57a; mkdir -p $O
{ git log --oneline -1; git status --short; nvidia-smi -L; } > $O/commit.txt
timeout 330 python bench/gemm_lab.py --only lab,flat+tstore --out $O > $O/lab.txt 2>&1; echo "rc=$?" >> $O/lab.txt
grep -v '^{' $O/lab.txt
timeout 200 python bench/results/2026-12-05-h200-s56/scripts/fp32_now.py > $O/fp32.txt 2>&1; echo "rc=$?" >> $O/fp32.txt; cat $O/fp32.txt
