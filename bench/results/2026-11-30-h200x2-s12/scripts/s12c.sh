#!/bin/bash
# session 12, call c (2 H200s): copy_engine_persistent with its counts raised per program
# after each chunk's run of tiles (outside the tile loop: s12b's counts inside it stopped
# Triton's software pipelining, 3.5x slower). GPU test of the engine, then GEMM-RS on all
# six shapes after the tuner (the engine in the "alt" column), then every TP GEMM GPU test
export PYTHONPATH=$PWD NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
R=$OUT/s12c; mkdir -p $R
finish() { cd $OUT && tar czf s12c.tgz s12c && rm -rf s12c; exit 0; }
timeout 90 python3 -m pytest -m gpu tests/ops/test_tp_gemm.py -k persistent_gpu -q -rf -p no:cacheprovider > $R/gpu_test_persistent.txt 2>&1; rc=$?; echo "rc=$rc seconds=$SECONDS" >> $R/gpu_test_persistent.txt
[ $rc -eq 0 ] || finish
DITRON_CACHE_DIR=$R/cache timeout 330 python3 -m ditron bench tp-gemm --world-size 2 --ops rs --tune --graphs --alt-rs copy_engine_persistent --out $R/tp_rs > $R/tp_rs.txt 2>&1; echo "rc=$? seconds=$SECONDS" >> $R/tp_rs.txt
left=$((580 - SECONDS))
[ $left -gt 60 ] && { timeout $left python3 -m pytest -m gpu tests/ops/test_tp_gemm.py -q -rf -p no:cacheprovider > $R/gpu_tests.txt 2>&1; echo "rc=$? seconds=$SECONDS" >> $R/gpu_tests.txt; }
finish
