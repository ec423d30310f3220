#!/bin/bash
# s9c: GEMM-RS engine "copy_engine_epilogue" (the peers' partials added in the own rows'
# GEMM epilogue), after s9b's shared-memory failure: GPU tests, the tuned benchmark,
# correctness at scale.
export PYTHONPATH=$PWD NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
R=$OUT/s9c; mkdir -p $R
timeout 120 python3 -m pytest -m gpu tests/ops/test_tp_gemm.py -q -rf -p no:cacheprovider > $R/gpu_tests.txt 2>&1; echo "rc=$?" >> $R/gpu_tests.txt
export DITRON_CACHE_DIR=$R/cache
timeout 250 python3 -m ditron bench tp-gemm --world-size 2 --ops rs --tune --graphs --out $R/tp_gemm_rs > $R/tp_gemm_rs.txt 2>&1; echo "rc=$?" >> $R/tp_gemm_rs.txt
unset DITRON_CACHE_DIR
timeout 170 python3 bench/check_ops_at_scale.py --world-size 2 --only tp > $R/check_ops.txt 2>&1; echo "rc=$?" >> $R/check_ops.txt
cd $OUT && tar czf s9c.tgz s9c && rm -rf s9c
