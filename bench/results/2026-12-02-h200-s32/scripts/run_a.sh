#!/usr/bin/env bash
# s32a: the GPU-marked tests session 31 could not run with the volatile-load waits (nn,
# fused collectives, out=), and the late-signal block-wait test on the cuda backend. One H200.
set -u
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 DITRON_LAUNCH_TIMEOUT=200
O=$OUT/s32a; mkdir -p $O
{ git log --oneline -1; git status --short; nvidia-smi -L; } > $O/commit.txt
pip install --quiet --no-deps -e . > /dev/null 2>&1
timeout 150 python -m pytest -q -p no:cacheprovider --ditron-backend cuda tests/language/test_primitives.py -k late 2>&1 | tail -4 > $O/late_cuda.txt
timeout 380 python -m pytest -q -p no:cacheprovider -m gpu --durations=0 tests/nn tests/ops/test_fused_collectives.py tests/ops/test_out.py 2>&1 | tail -16 > $O/gpu_tests.txt
cat $O/late_cuda.txt $O/gpu_tests.txt
