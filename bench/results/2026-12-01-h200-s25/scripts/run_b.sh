#!/bin/bash
# s25b: uneven chunks for the pulled GEMM-RS, one H200
export PYTHONPATH=$PWD NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
O=$OUT/s25b; mkdir -p $O
{ git log --oneline -1; git status --short; nvidia-smi -L; } > $O/commit.txt
timeout 200 python3 scripts/split_lab.py > $O/split.txt 2>&1
echo "rc=$?" >> $O/split.txt
cat $O/split.txt
