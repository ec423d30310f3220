#!/usr/bin/env bash
# s52e: the six GPU-marked tests s52d's limit cut off (TP GEMMs in a CUDA graph with
# in-place rows, AG-GEMM own rows in place, the megakernel's).
set -u
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 DITRON_LAUNCH_TIMEOUT=120
O=$OUT/s52e; mkdir -p $O
{ git log --oneline -1; git status --short; nvidia-smi -L; } > $O/commit.txt
timeout 270 python -m pytest -v -p no:cacheprovider --durations=10 -m gpu tests/ops/test_tp_gemm.py tests/task/test_megakernel.py -k "in_cuda_graph or own_rows or stack" > $O/gpu_tests.txt 2>&1
echo "rc=$?" >> $O/gpu_tests.txt; grep -E "PASSED|FAILED|ERROR|passed|failed|rc=" $O/gpu_tests.txt
