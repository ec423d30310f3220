#!/bin/bash
# session 6, call f: the final code's checks on 2 H200s
export PYTHONPATH=$PWD NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
R=$OUT/s6f; mkdir -p $R
timeout 230 python3 bench/check_ops_at_scale.py --world-size 2 > $R/check_ops.txt 2>&1; echo "rc=$?" >> $R/check_ops.txt
