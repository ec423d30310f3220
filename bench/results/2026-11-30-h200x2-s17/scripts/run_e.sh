#!/bin/bash
# s17e: the hybrid lab (fixed); the tuned GEMM-RS benchmark; the collectives harness
export PYTHONPATH=$PWD NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
O=$OUT/s17e; mkdir -p $O
DITRON_HEAP_SIZE=8G timeout 130 python3 bench/results/2026-11-30-h200x2-s17/scripts/hybrid_lab.py > $O/hybrid_lab.txt 2>&1; echo "rc=$?" >> $O/hybrid_lab.txt
DITRON_CACHE_DIR=$(mktemp -d) timeout 220 python3 -m ditron bench tp-gemm --world-size 2 --ops rs --tune --graphs --out $O/tp_rs > $O/tp_rs.txt 2>&1; echo "rc=$?" >> $O/tp_rs.txt
timeout 120 python3 -m ditron bench collectives --world-size 2 --ops all_gather,reduce_scatter --engines copy_engine,sm --sizes 64M,96M,256M,512M,1G --graphs --graph-max 1G --busy --out $O/coll > $O/coll.txt 2>&1; echo "rc=$?" >> $O/coll.txt
