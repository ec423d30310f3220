#!/usr/bin/env bash
# s28a (one H200, two or more ranks sharing it): ditron.nn on the CUDA backend.
set -u
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export DITRON_LAUNCH_TIMEOUT=120
O=$OUT/s28a; mkdir -p $O
{ git log --oneline -1; git status --short; nvidia-smi -L; } > $O/commit.txt 2>&1
timeout 200 python3 -m pytest -v -p no:cacheprovider -m gpu tests/nn > $O/gpu_marked.txt 2>&1
tail -3 $O/gpu_marked.txt
timeout 300 python3 -m pytest -v -p no:cacheprovider --ditron-backend cuda tests/nn > $O/cuda_backend.txt 2>&1
tail -12 $O/cuda_backend.txt
