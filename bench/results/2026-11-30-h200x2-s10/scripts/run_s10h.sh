#!/bin/bash
# s10h: one H200 shared by two ranks (gloo default group: the fallback cannot run or be
# captured): TP GEMM GPU tests and the tuner with its graph pass on one scaled shape.
export PYTHONPATH=$PWD NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export CUDA_VISIBLE_DEVICES=0
R=$OUT/s10h; mkdir -p $R
timeout 90 python3 -m pytest -m gpu tests/ops/test_tp_gemm.py -q -rf -p no:cacheprovider > $R/gpu_tests_shared.txt 2>&1; echo "rc=$?" >> $R/gpu_tests_shared.txt
DITRON_CACHE_DIR=$R/cache timeout 120 python3 -m ditron bench tp-gemm --world-size 2 --ops rs --shapes 4096x11008 --scale 0.5 --tune --graphs --out $R/tp_shared > $R/tp_shared.txt 2>&1; echo "rc=$?" >> $R/tp_shared.txt
cd $OUT && tar czf s10h.tgz s10h && rm -rf s10h
