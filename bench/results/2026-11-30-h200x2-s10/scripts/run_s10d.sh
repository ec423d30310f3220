#!/bin/bash
# s10d: the final code: GPU tests on 2 H200s (TP GEMMs) and with one H200 shared by two
# ranks (all), the RS benchmark with s10c's tuned decisions (graphs: the tuned pull maps to
# pushes), TP checks at scale on the shared H200.
export PYTHONPATH=$PWD NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
R=$OUT/s10d; mkdir -p $R
nvidia-smi --query-gpu=name,clocks.sm,temperature.gpu --format=csv > $R/smi.txt 2>&1
timeout 80 python3 -m pytest -m gpu tests/ops/test_tp_gemm.py -q -rf -p no:cacheprovider > $R/gpu_tests.txt 2>&1; echo "rc=$?" >> $R/gpu_tests.txt
mkdir -p $R/cache && cp bench/results/2026-11-30-h200x2-s10/s10c/cache/tune.json $R/cache/
DITRON_CACHE_DIR=$R/cache timeout 120 python3 -m ditron bench tp-gemm --world-size 2 --ops rs --graphs --out $R/tp_gemm_rs > $R/tp_gemm_rs.txt 2>&1; echo "rc=$?" >> $R/tp_gemm_rs.txt
CUDA_VISIBLE_DEVICES=0 timeout 200 python3 -m pytest -m gpu tests/ -q -rf -p no:cacheprovider > $R/gpu_tests_shared.txt 2>&1; echo "rc=$?" >> $R/gpu_tests_shared.txt
CUDA_VISIBLE_DEVICES=0 timeout 110 python3 bench/check_ops_at_scale.py --world-size 2 --only tp > $R/check_ops_shared.txt 2>&1; echo "rc=$?" >> $R/check_ops_shared.txt
cd $OUT && tar czf s10d.tgz s10d && rm -rf s10d
