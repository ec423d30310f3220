#!/bin/bash
# session 7, call f: the final library code's TP GEMMs on 2 H200s (deferred epilogue
# signals; the AG-GEMM push reorder of s7e reverted)
export PYTHONPATH=$PWD NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
R=$OUT/s7f; mkdir -p $R
timeout 140 python3 bench/check_ops_at_scale.py --world-size 2 --only tp > $R/check_ops_tp.txt 2>&1; echo "rc=$?" >> $R/check_ops_tp.txt
timeout 75 python3 -m pytest -m gpu tests/ops/test_tp_gemm.py -q -rf -p no:cacheprovider > $R/gpu_tests_tp.txt 2>&1; echo "rc=$?" >> $R/gpu_tests_tp.txt
cd $OUT && tar czf s7f.tgz s7f && rm -rf s7f
