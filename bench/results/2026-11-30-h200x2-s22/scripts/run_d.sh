#!/bin/bash
export PYTHONPATH=$PWD NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
O=$OUT/s22d; mkdir -p $O
git log --oneline -1 > $O/commit.txt; git status --short >> $O/commit.txt
DITRON_LANDING=0 DITRON_HEAP_SIZE=4G timeout 400 python3 bench/results/2026-11-30-h200x2-s22/scripts/replay_ab.py 64,96,128,256 > $O/replay_ab.txt 2>&1; echo "rc=$?" >> $O/replay_ab.txt
grep -v "^check.*ok" $O/replay_ab.txt | tail -30
