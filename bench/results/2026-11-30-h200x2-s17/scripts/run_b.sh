#!/bin/bash
# s17b: host time per eager call (cProfile); GPU tests of the collectives and engines;
# the collectives harness with the all-gather's tapered first chunks over three lanes
export PYTHONPATH=$PWD NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
O=$OUT/s17b; mkdir -p $O
DITRON_HEAP_SIZE=2G timeout 120 python3 bench/results/2026-11-30-h200x2-s17/scripts/prof.py > $O/prof.txt 2>&1; echo "rc=$?" >> $O/prof.txt
timeout 240 python3 -m pytest -q -m gpu tests/ops/test_collectives.py tests/engines/test_engines.py > $O/gpu_tests.txt 2>&1; echo "rc=$?" >> $O/gpu_tests.txt
timeout 150 python3 -m ditron bench collectives --world-size 2 --ops all_gather,reduce_scatter --engines copy_engine,sm --sizes 64M,96M,256M,512M,1G --graphs --graph-max 1G --busy --out $O/coll > $O/coll.txt 2>&1; echo "rc=$?" >> $O/coll.txt
