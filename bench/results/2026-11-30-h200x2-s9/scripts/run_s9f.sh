#!/bin/bash
# s9f: every GPU test with one H200 shared by two ranks (final code of the session).
export PYTHONPATH=$PWD NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
R=$OUT/s9f; mkdir -p $R
CUDA_VISIBLE_DEVICES=0 timeout 280 python3 -m pytest -m gpu tests/ -q -rfs -p no:cacheprovider > $R/gpu_tests_shared.txt 2>&1; echo "rc=$?" >> $R/gpu_tests_shared.txt
cd $OUT && tar czf s9f.tgz s9f && rm -rf s9f
