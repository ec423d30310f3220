#!/bin/bash
# session 11, call c (2 H200s): checks of 33ae981 on 2 GPUs (check_ops_at_scale --only tp:
# every AG-GEMM engine incl. copy_engine_matmul) and on one H200 shared by two ranks (every
# GPU test); the two small AG-GEMM shapes again with s11b's tuned decisions
export PYTHONPATH=$PWD NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
R=$OUT/s11c; mkdir -p $R
git log --oneline -1 > $R/commit.txt; git status --short >> $R/commit.txt
timeout 150 python3 bench/check_ops_at_scale.py --world-size 2 --only tp > $R/check_tp.txt 2>&1; echo "rc=$?" >> $R/check_tp.txt
cp -r bench/results/2026-11-30-h200x2-s11/s11b/cache /tmp/s11b_cache
DITRON_CACHE_DIR=/tmp/s11b_cache timeout 120 python3 -m ditron bench tp-gemm --world-size 2 --ops ag --shapes 11008x4096,14336x4096 --graphs --out $R/tp_ag_small > $R/tp_ag_small.txt 2>&1; echo "rc=$?" >> $R/tp_ag_small.txt
CUDA_VISIBLE_DEVICES=0 timeout 280 python3 -m pytest -m gpu tests/ -q -rf -p no:cacheprovider > $R/gpu_tests_shared.txt 2>&1; echo "rc=$?" >> $R/gpu_tests_shared.txt
cd $OUT && tar czf s11c.tgz s11c && rm -rf s11c
