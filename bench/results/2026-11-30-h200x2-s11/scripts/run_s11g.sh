#!/bin/bash
# session 11, call g (2 H200s): GEMM-RS by pulls with its chunk signals raised beside the
# compute stream (notify_beside); the TP-GEMM GPU tests, then an A/B lab against the
# signals on the compute stream, same run
export PYTHONPATH=$PWD NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
R=$OUT/s11g; mkdir -p $R
git status --short > $R/commit.txt
timeout 120 python3 -m pytest -m gpu tests/ops/test_tp_gemm.py -q -rf -p no:cacheprovider > $R/gpu_tests.txt 2>&1; echo "rc=$?" >> $R/gpu_tests.txt
timeout 100 python3 lab_s11/rs_beside_lab.py > $R/rs_beside_lab.txt 2>&1; echo "rc=$?" >> $R/rs_beside_lab.txt
cd $OUT && tar czf s11g.tgz s11g && rm -rf s11g
