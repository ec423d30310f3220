#!/bin/bash
# s9d: copy_engine_epilogue with one SM left to the signal kernels: the tuned GEMM-RS
# benchmark, the GPU tests, then correctness with one H200 shared by two ranks.
export PYTHONPATH=$PWD NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
R=$OUT/s9d; mkdir -p $R
export DITRON_CACHE_DIR=$R/cache
timeout 250 python3 -m ditron bench tp-gemm --world-size 2 --ops rs --tune --graphs --out $R/tp_gemm_rs > $R/tp_gemm_rs.txt 2>&1; echo "rc=$?" >> $R/tp_gemm_rs.txt
unset DITRON_CACHE_DIR
timeout 100 python3 -m pytest -m gpu tests/ops/test_tp_gemm.py -q -rf -p no:cacheprovider > $R/gpu_tests.txt 2>&1; echo "rc=$?" >> $R/gpu_tests.txt
CUDA_VISIBLE_DEVICES=0 timeout 150 python3 bench/check_ops_at_scale.py --world-size 2 --only tp > $R/check_ops_shared.txt 2>&1; echo "rc=$?" >> $R/check_ops_shared.txt
cd $OUT && tar czf s9d.tgz s9d && rm -rf s9d
