#!/bin/bash
# session 8, call c (2 H200s): cuBLAS layouts (the tuner's b), the graph-safe copy-engine
# GEMM-RS checked (pytest, check_ops), then GEMM-RS after the tuner (transposed b), eager
# and under CUDA graphs (with the copy-engine GEMM-RS timed under graphs)
export PYTHONPATH=$PWD NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
R=$OUT/s8c; mkdir -p $R
timeout 60 python3 lab_s8/layout_lab.py > $R/layout_lab.txt 2>&1; echo "rc=$?" >> $R/layout_lab.txt
timeout 100 python3 -m pytest -m gpu tests/ops/test_tp_gemm.py -q -rf -p no:cacheprovider > $R/gpu_tests_tp.txt 2>&1; echo "rc=$?" >> $R/gpu_tests_tp.txt
timeout 150 python3 bench/check_ops_at_scale.py --world-size 2 --only tp > $R/check_ops_tp.txt 2>&1; echo "rc=$?" >> $R/check_ops_tp.txt
export DITRON_CACHE_DIR=$R/cache
timeout 240 python3 -m ditron bench tp-gemm --world-size 2 --ops rs --tune --graphs --out $R/tp_gemm_rs > $R/tp_gemm_rs.txt 2>&1; echo "rc=$?" >> $R/tp_gemm_rs.txt
cd $OUT && tar czf s8c.tgz s8c && rm -rf s8c
