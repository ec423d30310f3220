#!/usr/bin/env bash
# s28e: ditron.nn on the CUDA backend: autocast and inductor tests, and CUDA graphs through
# torch.compile(mode="reduce-overhead")
set -u
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export DITRON_LAUNCH_TIMEOUT=120
O=$OUT/s28e; mkdir -p $O
{ git log --oneline -1; git status --short; nvidia-smi -L; } > $O/commit.txt 2>&1
timeout 240 python3 -m pytest -v -p no:cacheprovider --ditron-backend cuda tests/nn \
  -k "autocast or compile or gpu" > $O/cuda_backend.txt 2>&1
tail -6 $O/cuda_backend.txt
timeout 200 python3 scripts/cudagraph_nn.py 2>&1 | grep -v Warning | tee $O/cudagraph_nn.txt | tail -8
