#!/bin/bash
# s9e: session 8's exchange rewrite with one H200 shared by two ranks (collectives), then
# the AG-GEMM benchmark after the tuner on 2 H200s (final code).
export PYTHONPATH=$PWD NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
R=$OUT/s9e; mkdir -p $R
CUDA_VISIBLE_DEVICES=0 timeout 200 python3 bench/check_ops_at_scale.py --world-size 2 --only collectives > $R/check_ops_shared.txt 2>&1; echo "rc=$?" >> $R/check_ops_shared.txt
export DITRON_CACHE_DIR=$R/cache
timeout 150 python3 -m ditron bench tp-gemm --world-size 2 --ops ag --tune --graphs --out $R/tp_gemm_ag > $R/tp_gemm_ag.txt 2>&1; echo "rc=$?" >> $R/tp_gemm_ag.txt
cd $OUT && tar czf s9e.tgz s9e && rm -rf s9e
