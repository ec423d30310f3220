#!/bin/bash
# session 6, call e: one H200 shared by two ranks: every op (final code of the session) and the GPU-marked tests
export PYTHONPATH=$PWD NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
R=$OUT/s6e; mkdir -p $R
nvidia-smi --query-gpu=name --format=csv > $R/gpus.txt
timeout 280 python3 bench/check_ops_at_scale.py --world-size 2 > $R/check_ops_shared.txt 2>&1; echo "rc=$?" >> $R/check_ops_shared.txt
timeout 230 python3 -m pytest -m gpu tests/ -q -p no:cacheprovider > $R/gpu_tests_shared.txt 2>&1; echo "rc=$?" >> $R/gpu_tests_shared.txt
