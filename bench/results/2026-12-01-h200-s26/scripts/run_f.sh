#!/bin/bash
# s26f (one H200, two ranks sharing it): issue 5's step 4 script, the TP family, on the session-26 GEMM-RS code
export PYTHONPATH=$PWD NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
O=$OUT/s26f; mkdir -p $O
{ git log --oneline -1; git status --short; nvidia-smi -L; } > $O/commit.txt
timeout 170 python3 bench/check_ops_at_scale.py --world-size 2 --only tp > $O/check_ops_tp.txt 2>&1
echo "rc=$?" >> $O/check_ops_tp.txt; tail -4 $O/check_ops_tp.txt
