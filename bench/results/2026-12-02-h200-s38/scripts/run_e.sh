#!/usr/bin/env bash
# s38e: the rest of the task level's tests on the cuda backend (ranks sharing the H200),
# now that the megakernel's GEMM tiles load through TMA descriptors by default on sm_90.
set -u
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 DITRON_LAUNCH_TIMEOUT=150
O=$OUT/s38e; mkdir -p $O
{ git log --oneline -1; git status --short; nvidia-smi -L; } > $O/commit.txt
timeout 500 python -m pytest -v -p no:cacheprovider --ditron-backend cuda \
  tests/task/test_megakernel.py tests/task/test_mlp_tuner.py tests/task/test_trace.py \
  -k "not stack_gpu and not cuda_graph and not descriptors" \
  > $O/pytest.txt 2>&1; echo "rc=$?" >> $O/pytest.txt
grep -E "PASS|FAIL|ERROR|passed|failed|rc=" $O/pytest.txt | tail -45
