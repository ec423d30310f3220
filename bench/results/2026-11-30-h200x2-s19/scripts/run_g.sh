#!/bin/bash
# s19g (one H200 shared by two ranks: the two-GPU kind was not lent): the eager chunked
# pushes as driver calls (ops/raw_pushes.py): GPU tests of the collectives; host time per
# call with the raw path and with the generic one
export PYTHONPATH=$PWD NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
O=$OUT/s19g; mkdir -p $O
nvidia-smi --query-gpu=name --format=csv > $O/gpu.txt
timeout 170 python3 -m pytest -m gpu -q tests/ops/test_collectives.py > $O/gpu_tests.txt 2>&1; echo "rc=$?" >> $O/gpu_tests.txt
tail -3 $O/gpu_tests.txt
for raw in 1 0; do
DITRON_RAW_PUSHES=$raw DITRON_HEAP_SIZE=3G timeout 45 python3 bench/results/2026-11-30-h200x2-s19/scripts/host_ag.py 64,128,256 > $O/host_ag_raw$raw.txt 2>&1; echo "rc=$?" >> $O/host_ag_raw$raw.txt
grep "==\|rc=" $O/host_ag_raw$raw.txt
done
