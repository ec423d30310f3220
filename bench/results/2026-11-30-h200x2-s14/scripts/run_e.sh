#!/bin/bash
# s14e: the new engine's GPU tests (eager, graph-safe, captured), then the tuned GEMM-RS
# benchmark on the three small shapes with the new engine in the 'alt' column.
export PYTHONPATH=$PWD NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
D=$OUT/s14e; mkdir -p $D
timeout 150 python3 -m pytest -q -m gpu tests/ops/test_tp_gemm.py -p no:cacheprovider \
  -k "pulled_persistent or cuda_graph" > $D/gpu_tests.txt 2>&1
echo "pytest rc=$?" >> $D/gpu_tests.txt
tail -2 $D/gpu_tests.txt
export DITRON_CACHE_DIR=$D/cache
timeout 300 python3 -m ditron bench tp-gemm --world-size 2 --ops rs --tune --graphs \
  --shapes 4096x11008,4096x14336,3584x14336 \
  --alt-rs copy_engine_pull_persistent --out $D/tp_rs > $D/tp_rs.txt 2> $D/tp_rs.err
echo "bench rc=$?" >> $D/tp_rs.txt
grep -v "^\s*$" $D/tp_rs.txt | tail -30
