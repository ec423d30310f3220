#!/bin/bash
export PYTHONPATH=$PWD NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
O=$OUT/s22e; mkdir -p $O
git log --oneline -1 > $O/commit.txt; git status --short >> $O/commit.txt
timeout 200 python3 -m pytest -q -m gpu tests/ops/test_out.py > $O/gpu_tests.txt 2>&1; echo "rc=$?" >> $O/gpu_tests.txt
tail -3 $O/gpu_tests.txt
DITRON_HEAP_SIZE=4G timeout 360 python3 bench/results/2026-11-30-h200x2-s22/scripts/out_ab.py 16,32,64,96,128,256 > $O/out_ab.txt 2>&1; echo "rc=$?" >> $O/out_ab.txt
grep -v "^check.*ok" $O/out_ab.txt | tail -30
