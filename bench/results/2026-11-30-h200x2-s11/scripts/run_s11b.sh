#!/bin/bash
# session 11, call b (2 H200s): AG-GEMM engine copy_engine_matmul (copy-engine pushes from a,
# torch.matmul per chunk), pushes from a for every pushed engine; "auto" all-gather takes
# the copy engine under graphs from 64 MB per peer. GPU tests, then the AG-GEMM benchmark
# after the tuner (every shape, eager and under CUDA graphs)
export PYTHONPATH=$PWD NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
R=$OUT/s11b; mkdir -p $R
git log --oneline -1 > $R/commit.txt; git status --short >> $R/commit.txt
timeout 150 python3 -m pytest -m gpu tests/ops/test_tp_gemm.py tests/ops/test_fused_collectives.py -q -rf -p no:cacheprovider > $R/gpu_tests.txt 2>&1; echo "rc=$?" >> $R/gpu_tests.txt
DITRON_CACHE_DIR=$R/cache timeout 330 python3 -m ditron bench tp-gemm --world-size 2 --ops ag --tune --graphs --out $R/tp_gemm_ag > $R/tp_gemm_ag.txt 2>&1; echo "rc=$?" >> $R/tp_gemm_ag.txt
cd $OUT && tar czf s11b.tgz s11b && rm -rf s11b
