#!/bin/bash
export PYTHONPATH=$PWD NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
O=$OUT/s22a; mkdir -p $O
git log --oneline -1 > $O/commit.txt; git status --short >> $O/commit.txt
timeout 200 python3 -m pytest -q -m gpu tests/kernels/test_landing.py tests/ops/test_raw_pushes.py > $O/gpu_tests.txt 2>&1; echo "rc=$?" >> $O/gpu_tests.txt
tail -3 $O/gpu_tests.txt
timeout 330 python3 bench/results/2026-11-30-h200x2-s22/scripts/land_ab.py 64,96,128,256 4,8,16,8p32 > $O/land_ab.txt 2>&1; echo "rc=$?" >> $O/land_ab.txt
grep -v "^check.*ok" $O/land_ab.txt | tail -30
