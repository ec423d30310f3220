#!/bin/bash
# s21a: host cost probe, the collectives harness and every GPU test on the committed code
export PYTHONPATH=$PWD NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
O=$OUT/s21a; mkdir -p $O
git log --oneline -1 > $O/commit.txt; git status --short >> $O/commit.txt
nvidia-smi -L > $O/gpu.txt
DITRON_HEAP_SIZE=2G timeout 90 python3 bench/results/2026-11-30-h200x2-s21/scripts/host_probe.py 64,128 > $O/host_probe.txt 2>&1; echo "rc=$?" >> $O/host_probe.txt
DITRON_HEAP_SIZE=8G timeout 140 python3 -m ditron bench collectives --world-size 2 --ops all_gather,reduce_scatter --engines copy_engine,sm --sizes 64M,96M,128M,256M,512M,1G --graphs --graph-max 1G --busy --out $O/coll > $O/coll.txt 2>&1; echo "rc=$?" >> $O/coll.txt
tail -30 $O/coll.txt
timeout 355 python3 -m pytest -q -m gpu tests/ > $O/gpu_tests.txt 2>&1; echo "rc=$?" >> $O/gpu_tests.txt
tail -3 $O/gpu_tests.txt
