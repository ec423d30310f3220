#!/bin/bash
# session 7, call d: the session's final kernels on 2 H200s: every op checked, then the TP
# GEMMs after the tuner, eager and under CUDA graphs
export PYTHONPATH=$PWD NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
R=$OUT/s7d; mkdir -p $R
timeout 230 python3 bench/check_ops_at_scale.py --world-size 2 > $R/check_ops.txt 2>&1; echo "rc=$?" >> $R/check_ops.txt
export DITRON_CACHE_DIR=$R/cache
timeout 160 python3 -m ditron bench tp-gemm --world-size 2 --ops rs --tune --graphs --out $R/tp_gemm_rs > $R/tp_gemm_rs.txt 2>&1; echo "rc=$?" >> $R/tp_gemm_rs.txt
timeout 170 python3 -m ditron bench tp-gemm --world-size 2 --ops ag --tune --graphs --out $R/tp_gemm_ag > $R/tp_gemm_ag.txt 2>&1; echo "rc=$?" >> $R/tp_gemm_ag.txt
cd $OUT && tar czf s7d.tgz s7d && rm -rf s7d
