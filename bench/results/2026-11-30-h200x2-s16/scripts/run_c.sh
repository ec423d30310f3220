#!/bin/bash
export DITRON_HEAP_SIZE=6G PYTHONPATH=$PWD NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
mkdir -p $OUT/s16c
timeout 280 python3 bench/results/2026-11-30-h200x2-s16/scripts/taper_lab.py > $OUT/s16c/taper_lab.txt 2>&1; echo "rc=$?" >> $OUT/s16c/taper_lab.txt
grep -v Warning $OUT/s16c/taper_lab.txt | tail -20
