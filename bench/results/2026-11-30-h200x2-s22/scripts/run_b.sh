#!/bin/bash
export PYTHONPATH=$PWD NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
O=$OUT/s22b; mkdir -p $O
git log --oneline -1 > $O/commit.txt; git status --short >> $O/commit.txt
timeout 300 python3 bench/results/2026-11-30-h200x2-s22/scripts/land_host.py 96 16 > $O/land_host.txt 2>&1; echo "rc=$?" >> $O/land_host.txt
grep -E "host|rc=" $O/land_host.txt
grep -A30 "== profile" $O/land_host.txt | head -80
