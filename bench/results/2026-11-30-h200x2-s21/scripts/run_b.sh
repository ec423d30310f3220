#!/bin/bash
# s21b: eager copy-engine exchanges tapered from 16 MB against 64 MB (busy, head-started,
# host, timelines at 64 MB); the tuned AG-GEMM benchmark (eager and CUDA graphs)
export PYTHONPATH=$PWD NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
O=$OUT/s21b; mkdir -p $O
git log --oneline -1 > $O/commit.txt; git status --short >> $O/commit.txt
DITRON_HEAP_SIZE=4G timeout 150 python3 bench/results/2026-11-30-h200x2-s21/scripts/eager_ab.py 64,96,128 64,16 64 > $O/eager_ab.txt 2>&1; echo "rc=$?" >> $O/eager_ab.txt
grep "^r" $O/eager_ab.txt | sort -k4,4 -k5,5 -k6,6 | head -80
DITRON_CACHE_DIR=$(mktemp -d) timeout 380 python3 -m ditron bench tp-gemm --world-size 2 --ops ag --tune --graphs --out $O/tp_ag > $O/tp_ag.txt 2>&1; echo "rc=$?" >> $O/tp_ag.txt
tail -24 $O/tp_ag.txt
