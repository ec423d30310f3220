#!/bin/bash
# s25f (one H200, two ranks sharing it): flags per inbox, the stale-flag refusal; every TP-GEMM GPU test with flags on
export PYTHONPATH=$PWD NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export TORCH_SYMM_MEM_ALLOW_OVERLAPPING_DEVICES=1
O=$OUT/s25f; mkdir -p $O
{ git log --oneline -1; git status --short; nvidia-smi -L; } > $O/commit.txt
timeout 150 python3 -m pytest -q --ditron-backend cuda tests/ops/test_tp_gemm.py -k "with_flags and 2" > $O/pytest_flags_cuda.txt 2>&1
echo "rc=$?" >> $O/pytest_flags_cuda.txt; tail -3 $O/pytest_flags_cuda.txt
DITRON_PULL_FLAGS=1 timeout 300 python3 -m pytest -q -m gpu tests/ops/test_tp_gemm.py > $O/pytest_gpu_flags.txt 2>&1
echo "rc=$?" >> $O/pytest_gpu_flags.txt; tail -3 $O/pytest_gpu_flags.txt
