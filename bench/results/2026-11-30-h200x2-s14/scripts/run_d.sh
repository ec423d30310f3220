#!/bin/bash
# s14d: GPU tests of the TP GEMMs (new engine included), then the tuned GEMM-RS benchmark
# with the new engine beside auto (--alt-rs), eager and under CUDA graphs.
export PYTHONPATH=$PWD NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
D=$OUT/s14d; mkdir -p $D
nvidia-smi topo -m > $D/topo.txt 2>&1
timeout 200 python3 -m pytest -q -m gpu tests/ops/test_tp_gemm.py -p no:cacheprovider > $D/gpu_tests.txt 2>&1
echo "pytest rc=$?" >> $D/gpu_tests.txt
tail -3 $D/gpu_tests.txt
export DITRON_CACHE_DIR=$D/cache
timeout 330 python3 -m ditron bench tp-gemm --world-size 2 --ops rs --tune --graphs \
  --alt-rs copy_engine_pull_persistent --out $D/tp_rs > $D/tp_rs.txt 2> $D/tp_rs.err
echo "bench rc=$?" >> $D/tp_rs.txt
grep -v "^\s*$" $D/tp_rs.txt | tail -40
