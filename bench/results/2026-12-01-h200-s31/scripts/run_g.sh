#!/usr/bin/env bash
# s31g: the remaining GPU-marked tests with the volatile-load waits (engines, nn, fused
# collectives, out=). One H200.
set -u
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 DITRON_LAUNCH_TIMEOUT=200
O=$OUT/s31g; mkdir -p $O
{ git log --oneline -1; git status --short; nvidia-smi -L; } > $O/commit.txt
pip install --quiet --no-deps -e . > /dev/null 2>&1
timeout 140 python -m pytest -q -p no:cacheprovider -m gpu tests/engines tests/nn tests/ops/test_fused_collectives.py tests/ops/test_out.py 2>&1 | tail -6 > $O/gpu_tests.txt
cat $O/gpu_tests.txt
