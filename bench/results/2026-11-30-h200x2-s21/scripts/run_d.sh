#!/bin/bash
# s21d: eager A/B (busy and device us per call) of the all-gather by pushes / raw pulls
# (tapered or not) / the SM engine and the reduce-scatter tapered from 64 or 16 MB, against
# NCCL; the GPU collectives tests on this code
export PYTHONPATH=$PWD NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
O=$OUT/s21d; mkdir -p $O
git log --oneline -1 > $O/commit.txt; git status --short >> $O/commit.txt
DITRON_HEAP_SIZE=4G timeout 150 python3 bench/results/2026-11-30-h200x2-s21/scripts/gather_ab.py 64,96,128,256 > $O/gather_ab.txt 2>&1; echo "rc=$?" >> $O/gather_ab.txt
cat $O/gather_ab.txt
timeout 200 python3 -m pytest -q -m gpu tests/ops/test_collectives.py > $O/gpu_tests.txt 2>&1; echo "rc=$?" >> $O/gpu_tests.txt
tail -3 $O/gpu_tests.txt
