#!/bin/bash
# s17d: the hybrid lab; the GPU tests
export PYTHONPATH=$PWD NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
O=$OUT/s17d; mkdir -p $O
DITRON_HEAP_SIZE=8G timeout 150 python3 bench/results/2026-11-30-h200x2-s17/scripts/hybrid_lab.py > $O/hybrid_lab.txt 2>&1; echo "rc=$?" >> $O/hybrid_lab.txt
: timeout 300 python3 -m pytest -q -m gpu tests/ > $O/gpu_tests.txt 2>&1; echo "rc=$?" >> $O/gpu_tests.txt
