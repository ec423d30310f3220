#!/bin/bash
# s15d: every GPU-marked test on 2 H200s, the TP-GEMM ones again with both ranks on one H200,
# then the tuned GEMM-RS benchmark (all six shapes) on the committed code.
export PYTHONPATH=$PWD NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export DITRON_LAUNCH_TIMEOUT=120
D=$OUT/s15d; mkdir -p $D
git rev-parse --short HEAD > $D/commit.txt; git status --short >> $D/commit.txt
timeout 280 python3 -m pytest -q -p no:cacheprovider -m gpu tests/ > $D/gpu_tests.txt 2>&1
echo "pytest rc=$?" >> $D/gpu_tests.txt; tail -2 $D/gpu_tests.txt
CUDA_VISIBLE_DEVICES=0 timeout 120 python3 -m pytest -q -p no:cacheprovider -m gpu \
  tests/ops/test_tp_gemm.py -k cuda_graph > $D/gpu_tests_shared.txt 2>&1
echo "pytest rc=$?" >> $D/gpu_tests_shared.txt; tail -2 $D/gpu_tests_shared.txt
export DITRON_CACHE_DIR=$D/cache
timeout 180 python3 -m ditron bench tp-gemm --world-size 2 --ops rs --tune --graphs \
  --out $D/tp_rs > $D/tp_rs.txt 2> $D/tp_rs.err
echo "bench rc=$?" >> $D/tp_rs.txt
grep -v "^\s*$" $D/tp_rs.txt | tail -22
