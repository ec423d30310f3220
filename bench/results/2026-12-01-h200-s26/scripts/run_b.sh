#!/bin/bash
# s26b (one H200, two ranks sharing it): the host prologue of eager GEMM-RS calls (entry to
# first GEMM launch) and a profile of where the pulled call's host time goes
export PYTHONPATH=$PWD NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export TORCH_SYMM_MEM_ALLOW_OVERLAPPING_DEVICES=1
O=$OUT/s26b; mkdir -p $O
{ git log --oneline -1; git status --short; nvidia-smi -L; } > $O/commit.txt
timeout 120 python3 scripts/prologue_lab.py 8192,4096,11008 cuda profile > $O/prologue.txt 2>&1
echo "rc=$?" >> $O/prologue.txt; grep "rank\|rc=" $O/prologue.txt; grep -A34 ncalls $O/prologue.txt | cut -c1-150
