#!/bin/bash
export PYTHONPATH=$PWD NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
O=$OUT/s22c; mkdir -p $O
git log --oneline -1 > $O/commit.txt; git status --short >> $O/commit.txt
timeout 200 python3 bench/results/2026-11-30-h200x2-s22/scripts/launch_cost.py > $O/launch_cost.txt 2>&1; echo "rc=$?" >> $O/launch_cost.txt
cat $O/launch_cost.txt | tail -20
