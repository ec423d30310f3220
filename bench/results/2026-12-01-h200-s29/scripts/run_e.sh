#!/usr/bin/env bash
# s29e: one GEMM task, megakernel vs plain grid, per programs and num_warps (one H200)
set -u
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 DITRON_LAUNCH_TIMEOUT=300
O=$OUT/s29e; mkdir -p $O
{ git log --oneline -1; git status --short; nvidia-smi -L; } > $O/commit.txt
pip install --quiet --no-deps -e . > /dev/null 2>&1
timeout 300 python scripts/tile_lab2.py > $O/tile_lab2.txt 2>&1
tail -n 20 $O/tile_lab2.txt
