#!/bin/bash
# session 7, call e: the AG-GEMM push reorder (engine mark / start) and the tuner's wider
# confirmation on 2 H200s: GPU tests, the TP families of check_ops, tp-gemm after the tuner
export PYTHONPATH=$PWD NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
R=$OUT/s7e; mkdir -p $R
git log --oneline -1 > $R/commit.txt 2>&1
timeout 200 python3 -m pytest -m gpu tests/engines tests/ops/test_tp_gemm.py -q -p no:cacheprovider > $R/gpu_tests.txt 2>&1; echo "rc=$?" >> $R/gpu_tests.txt
timeout 150 python3 bench/check_ops_at_scale.py --world-size 2 --only tp > $R/check_ops_tp.txt 2>&1; echo "rc=$?" >> $R/check_ops_tp.txt
export DITRON_CACHE_DIR=$R/cache
timeout 200 python3 -m ditron bench tp-gemm --world-size 2 --tune --out $R/tp_gemm > $R/tp_gemm.txt 2>&1; echo "rc=$?" >> $R/tp_gemm.txt
cd $OUT && tar czf s7e.tgz s7e && rm -rf s7e
