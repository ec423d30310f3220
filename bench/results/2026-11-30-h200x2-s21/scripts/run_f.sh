#!/bin/bash
# s21f: the all-gather straight into a symmetric out: its GPU test, then eager busy / device
# us per call against the inbox exchange, the fused kernel and NCCL
export PYTHONPATH=$PWD NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
O=$OUT/s21f; mkdir -p $O
git log --oneline -1 > $O/commit.txt; git status --short >> $O/commit.txt
timeout 60 python3 -m pytest -q -m gpu tests/ops/test_all_gather_out.py > $O/gpu_tests.txt 2>&1; echo "rc=$?" >> $O/gpu_tests.txt
tail -3 $O/gpu_tests.txt
DITRON_HEAP_SIZE=4G timeout 75 python3 bench/results/2026-11-30-h200x2-s21/scripts/direct_ab.py 64,96,128,256 > $O/direct_ab.txt 2>&1; echo "rc=$?" >> $O/direct_ab.txt
cat $O/direct_ab.txt
