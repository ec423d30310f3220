#!/bin/bash
# s16e: the all-gather's pulls over two side streams against one; the GPU collective tests.
export DITRON_HEAP_SIZE=6G PYTHONPATH=$PWD NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
R=$OUT/s16e; mkdir -p $R
timeout 200 python3 bench/results/2026-11-30-h200x2-s16/scripts/lanes_lab.py > $R/lanes_lab.txt 2>&1; echo "rc=$?" >> $R/lanes_lab.txt
grep -v Warning $R/lanes_lab.txt | tail -12
unset DITRON_HEAP_SIZE
timeout 200 python3 -m pytest -q -m gpu tests/ops/test_collectives.py tests/ops/test_fused_collectives.py tests/engines/test_engines.py > $R/gpu_tests.txt 2>&1; echo "rc=$?" >> $R/gpu_tests.txt
tail -3 $R/gpu_tests.txt
