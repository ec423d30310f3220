#!/usr/bin/env bash
# s54c: the GPU-marked tests, second part (fused collectives, MoE, out=, TP GEMMs, megakernel).
set -u
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
O=$OUT/s54c; mkdir -p $O
{ git log --oneline -1; git status --short; nvidia-smi -L; } > $O/commit.txt
timeout 560 python -m pytest -v -p no:cacheprovider --durations=0 -m gpu tests/ops/test_fused_collectives.py tests/ops/test_moe.py tests/ops/test_out.py tests/ops/test_tp_gemm.py tests/task > $O/gpu_tests.txt 2>&1; echo "rc=$?" >> $O/gpu_tests.txt
grep -E "PASSED|FAILED|ERROR|passed|failed|rc=" $O/gpu_tests.txt | tail -n 30
