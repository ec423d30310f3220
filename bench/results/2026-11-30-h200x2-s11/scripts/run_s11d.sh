#!/bin/bash
# session 11, call d (2 H200s): the persistent AG-GEMM reads its own rows from a in place
# (OWN_A: no copy into the gathered buffer before the GEMM). GPU tests, then the AG-GEMM
# benchmark after the tuner (every shape, eager and under CUDA graphs)
export PYTHONPATH=$PWD NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
R=$OUT/s11d; mkdir -p $R
git log --oneline -1 > $R/commit.txt; git status --short >> $R/commit.txt; git diff --stat >> $R/commit.txt
timeout 150 python3 -m pytest -m gpu tests/ops/test_tp_gemm.py -q -rf -p no:cacheprovider > $R/gpu_tests.txt 2>&1; echo "rc=$?" >> $R/gpu_tests.txt
DITRON_CACHE_DIR=$R/cache timeout 330 python3 -m ditron bench tp-gemm --world-size 2 --ops ag --tune --graphs --out $R/tp_gemm_ag > $R/tp_gemm_ag.txt 2>&1; echo "rc=$?" >> $R/tp_gemm_ag.txt
cd $OUT && tar czf s11d.tgz s11d && rm -rf s11d
