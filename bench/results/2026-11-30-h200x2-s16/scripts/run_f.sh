#!/bin/bash
# s16f: GPU tests of the engines (copy engine with two lanes) and collectives; the
# all-gather >= 64 MB in the harness with the pulls over two lanes.
export PYTHONPATH=$PWD NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
R=$OUT/s16f; mkdir -p $R
timeout 150 python3 -m pytest -q -m gpu tests/engines/test_engines.py tests/ops/test_collectives.py > $R/gpu_tests.txt 2>&1; echo "rc=$?" >> $R/gpu_tests.txt
tail -3 $R/gpu_tests.txt
timeout 90 python3 -m ditron bench collectives --world-size 2 --ops all_gather --engines copy_engine,sm --sizes 64M,96M,256M,512M,1G --graphs --graph-max 1G --out $R/coll > $R/coll.txt 2>&1; echo "rc=$?" >> $R/coll.txt
grep -E "graph|rc=" $R/coll.txt | tail -16
