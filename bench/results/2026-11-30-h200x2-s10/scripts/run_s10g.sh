#!/bin/bash
# s10g: the tuner's pass under CUDA graphs: GPU tests, then the tuned RS benchmark (fresh
# cache) whose graph table runs the graph decisions.
export PYTHONPATH=$PWD NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
R=$OUT/s10g; mkdir -p $R
timeout 80 python3 -m pytest -m gpu tests/ops/test_tp_gemm.py -q -rf -p no:cacheprovider > $R/gpu_tests.txt 2>&1; echo "rc=$?" >> $R/gpu_tests.txt
DITRON_CACHE_DIR=$R/cache timeout 330 python3 -m ditron bench tp-gemm --world-size 2 --ops rs --tune --graphs --out $R/tp_gemm_rs > $R/tp_gemm_rs.txt 2>&1; echo "rc=$?" >> $R/tp_gemm_rs.txt
cd $OUT && tar czf s10g.tgz s10g && rm -rf s10g
