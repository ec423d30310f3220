#!/usr/bin/env bash
# s28c: the compile failure on the CUDA backend, piece by piece
set -u
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export DITRON_LAUNCH_TIMEOUT=120
O=$OUT/s28c; mkdir -p $O
{ git log --oneline -1; git status --short; nvidia-smi -L; } > $O/commit.txt 2>&1
timeout 400 python3 scripts/compile_parts.py 2>&1 | grep -v Warning | tee $O/parts.txt | tail -60
