#!/usr/bin/env bash
# s47d: s47c's lab again, each variant's workspace released after it (s47c ran out of heap).
set -u
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 DITRON_LAUNCH_TIMEOUT=150 DITRON_HEAP_SIZE=8G
O=$OUT/s47d; mkdir -p $O
{ git log --oneline -1; git status --short; nvidia-smi -L; } > $O/commit.txt
timeout 200 python bench/diag/a2a_copy_lab.py --out $O/lab.json > $O/lab.txt 2>&1; echo "rc=$?" >> $O/lab.txt
grep -E "^T|rc=|Error" $O/lab.txt | tail -16
