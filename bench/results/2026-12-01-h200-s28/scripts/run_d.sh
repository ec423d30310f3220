#!/usr/bin/env bash
# s28d: ditron.nn on the CUDA backend after the bias moved out of the autograd Functions
set -u
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export DITRON_LAUNCH_TIMEOUT=120
O=$OUT/s28d; mkdir -p $O
{ git log --oneline -1; git status --short; nvidia-smi -L; } > $O/commit.txt 2>&1
timeout 150 python3 scripts/compile_parts.py 2>&1 | grep -v Warning > $O/parts.txt; grep grad $O/parts.txt
timeout 300 python3 -m pytest -v -p no:cacheprovider --ditron-backend cuda tests/nn \
  -k "compile or gpu or differentiable or bad_inputs or matches_torch and 2" > $O/cuda_backend.txt 2>&1
tail -9 $O/cuda_backend.txt
