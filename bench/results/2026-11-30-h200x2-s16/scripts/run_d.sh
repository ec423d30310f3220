#!/bin/bash
# s16d: GPU tests, the tuned GEMM-RS benchmark (early_rows: two candidates) and the
# collectives >= 64 MB (reduce-scatter with tapered chunks) on the session's code.
export PYTHONPATH=$PWD NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
R=$OUT/s16d; mkdir -p $R
timeout 240 python3 -m pytest -q -m gpu tests/ > $R/gpu_tests.txt 2>&1; echo "rc=$?" >> $R/gpu_tests.txt
tail -3 $R/gpu_tests.txt
timeout 100 python3 -m ditron bench collectives --world-size 2 --ops all_gather,reduce_scatter --engines copy_engine,sm --sizes 64M,96M,256M,512M,1G --graphs --graph-max 1G --busy --out $R/coll > $R/coll.txt 2>&1; echo "rc=$?" >> $R/coll.txt
tail -2 $R/coll.txt
DITRON_CACHE_DIR=$R/cache timeout 200 python3 -m ditron bench tp-gemm --world-size 2 --ops rs --tune --graphs --out $R/tp_rs > $R/tp_rs.txt 2>&1; echo "rc=$?" >> $R/tp_rs.txt
grep -A16 "^op " $R/tp_rs.txt | grep -v tune
