#!/bin/bash
# session 11, call e (2 H200s): on 2bba57d (OWN_A): the AG-GEMM benchmark again with s11d's
# tuned decisions (every shape, eager and graphs); GEMM-RS after the tuner (fresh cache);
# the TP-GEMM GPU tests with one H200 shared by two ranks
export PYTHONPATH=$PWD NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
R=$OUT/s11e; mkdir -p $R
git status --short > $R/commit.txt
cp -r bench/results/2026-11-30-h200x2-s11/s11d/cache /tmp/s11d_cache
DITRON_CACHE_DIR=/tmp/s11d_cache timeout 160 python3 -m ditron bench tp-gemm --world-size 2 --ops ag --graphs --out $R/tp_ag_again > $R/tp_ag_again.txt 2>&1; echo "rc=$?" >> $R/tp_ag_again.txt
DITRON_CACHE_DIR=$R/cache timeout 250 python3 -m ditron bench tp-gemm --world-size 2 --ops rs --tune --graphs --out $R/tp_gemm_rs > $R/tp_gemm_rs.txt 2>&1; echo "rc=$?" >> $R/tp_gemm_rs.txt
CUDA_VISIBLE_DEVICES=0 timeout 120 python3 -m pytest -m gpu tests/ops/test_tp_gemm.py -q -rf -p no:cacheprovider > $R/gpu_tests_shared.txt 2>&1; echo "rc=$?" >> $R/gpu_tests_shared.txt
cd $OUT && tar czf s11e.tgz s11e && rm -rf s11e
