#!/bin/bash
# s10f: the final commit (the copy-engine GEMM-RS variants' shared set-up, a refactor made
# after s10d): TP GEMM GPU tests and checks at scale on 2 H200s.
export PYTHONPATH=$PWD NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
R=$OUT/s10f; mkdir -p $R
timeout 90 python3 -m pytest -m gpu tests/ops/test_tp_gemm.py -q -rf -p no:cacheprovider > $R/gpu_tests.txt 2>&1; echo "rc=$?" >> $R/gpu_tests.txt
timeout 150 python3 bench/check_ops_at_scale.py --world-size 2 --only tp > $R/check_ops.txt 2>&1; echo "rc=$?" >> $R/check_ops.txt
cd $OUT && tar czf s10f.tgz s10f && rm -rf s10f
