#!/bin/bash
# s9b: GEMM-RS with the peers' partials added in the own rows' GEMM epilogue
# (engine "copy_engine_epilogue"): GPU tests, correctness at scale, then the tuned benchmark.
export PYTHONPATH=$PWD NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
R=$OUT/s9b; mkdir -p $R
git rev-parse HEAD > $R/commit.txt 2>/dev/null
timeout 120 python3 -m pytest -m gpu tests/ops/test_tp_gemm.py -q -rf -p no:cacheprovider > $R/gpu_tests.txt 2>&1; echo "rc=$?" >> $R/gpu_tests.txt
timeout 200 python3 bench/check_ops_at_scale.py --world-size 2 --only tp > $R/check_ops.txt 2>&1; echo "rc=$?" >> $R/check_ops.txt
export DITRON_CACHE_DIR=$R/cache
timeout 240 python3 -m ditron bench tp-gemm --world-size 2 --ops rs --tune --graphs --out $R/tp_gemm_rs > $R/tp_gemm_rs.txt 2>&1; echo "rc=$?" >> $R/tp_gemm_rs.txt
cd $OUT && tar czf s9b.tgz s9b && rm -rf s9b
