#!/bin/bash
# s10c: GEMM-RS engine copy_engine_pull after the race fix: GPU tests, the tuned RS
# benchmark (pushed and pulled copy engine beside the tuned pick), the untuned benchmark
# on two shapes (the cost model), the host breakdown per chunk, correctness at scale.
export PYTHONPATH=$PWD NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
R=$OUT/s10c; mkdir -p $R
nvidia-smi --query-gpu=name,clocks.sm,temperature.gpu --format=csv > $R/smi.txt 2>&1
timeout 90 python3 -m pytest -m gpu tests/ops/test_tp_gemm.py -q -rf -p no:cacheprovider > $R/gpu_tests.txt 2>&1; echo "rc=$?" >> $R/gpu_tests.txt
DITRON_CACHE_DIR=$R/cache timeout 220 python3 -m ditron bench tp-gemm --world-size 2 --ops rs --tune --graphs --out $R/tp_gemm_rs > $R/tp_gemm_rs.txt 2>&1; echo "rc=$?" >> $R/tp_gemm_rs.txt
DITRON_CACHE_DIR=$R/empty_cache timeout 60 python3 -m ditron bench tp-gemm --world-size 2 --ops ag,rs --shapes 11008x4096,4096x11008 --out $R/tp_untuned > $R/tp_untuned.txt 2>&1; echo "rc=$?" >> $R/tp_untuned.txt
timeout 60 python3 bench/host_breakdown.py --world-size 2 --calls 40 --shape 8192,4096,11008 > $R/host_breakdown.txt 2>&1; echo "rc=$?" >> $R/host_breakdown.txt
timeout 130 python3 bench/check_ops_at_scale.py --world-size 2 --only tp > $R/check_ops.txt 2>&1; echo "rc=$?" >> $R/check_ops.txt
cd $OUT && tar czf s10c.tgz s10c && rm -rf s10c
