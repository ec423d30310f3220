#!/bin/bash
# s19f: host time of the eager copy-engine all-gather / reduce-scatter at 64-256 MB
export PYTHONPATH=$PWD NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
O=$OUT/s19f; mkdir -p $O
DITRON_HEAP_SIZE=4G timeout 150 python3 bench/results/2026-11-30-h200x2-s19/scripts/host_ag.py 64,128,256 > $O/host_ag.txt 2>&1; echo "rc=$?" >> $O/host_ag.txt
grep "==\|rc=" $O/host_ag.txt
