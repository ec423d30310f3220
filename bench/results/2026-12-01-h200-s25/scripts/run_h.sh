#!/bin/bash
# s25h (one H200): does the pull's wait start beside cuBLAS's pieces? spinning kernel vs a stream wait on a cleared flag
export PYTHONPATH=$PWD NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
O=$OUT/s25h; mkdir -p $O
{ git log --oneline -1; git status --short; nvidia-smi -L; } > $O/commit.txt
timeout 150 python3 scripts/coop_wait_lab.py > $O/coop_wait.txt 2>&1
echo "rc=$?" >> $O/coop_wait.txt; grep -v Warn $O/coop_wait.txt
