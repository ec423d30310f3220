#!/bin/bash
# session 12, call b (2 H200s): copy_engine_persistent after the s12a hang (the GEMM is now
# launched before the copy engine's waits for it are queued: a first launch may load the
# kernel, which can synchronise the context). Its GPU test first (stop there if it fails),
# then the three small GEMM-RS shapes after the tuner (method="overlap" forced to the new
# engine: the "ditron" column), then every TP GEMM GPU test if time is left
export PYTHONPATH=$PWD NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
R=$OUT/s12b; mkdir -p $R
finish() { cd $OUT && tar czf s12b.tgz s12b && rm -rf s12b; exit 0; }
timeout 90 python3 -m pytest -m gpu tests/ops/test_tp_gemm.py -k persistent_gpu -q -rf -p no:cacheprovider > $R/gpu_test_persistent.txt 2>&1; rc=$?; echo "rc=$rc seconds=$SECONDS" >> $R/gpu_test_persistent.txt
[ $rc -eq 0 ] || finish
DITRON_CACHE_DIR=$R/cache DITRON_RS_ENGINE=copy_engine_persistent timeout 300 python3 -m ditron bench tp-gemm --world-size 2 --ops rs --shapes 4096x11008,4096x14336,3584x14336 --tune --graphs --out $R/tp_rs_small > $R/tp_rs_small.txt 2>&1; echo "rc=$? seconds=$SECONDS" >> $R/tp_rs_small.txt
left=$((575 - SECONDS))
[ $left -gt 60 ] && { timeout $left python3 -m pytest -m gpu tests/ops/test_tp_gemm.py -q -rf -p no:cacheprovider > $R/gpu_tests.txt 2>&1; echo "rc=$? seconds=$SECONDS" >> $R/gpu_tests.txt; }
finish
