#!/bin/bash
# s25e (one H200, two ranks sharing it): the pulled GEMM-RS with chunk flags, eager graph-safe and captured
export PYTHONPATH=$PWD NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export TORCH_SYMM_MEM_ALLOW_OVERLAPPING_DEVICES=1
O=$OUT/s25e; mkdir -p $O
{ git log --oneline -1; git status --short; nvidia-smi -L; } > $O/commit.txt
timeout 150 python3 -m pytest -q --ditron-backend cuda tests/ops/test_tp_gemm.py -k "with_flags and 2" > $O/pytest_flags_cuda.txt 2>&1
echo "rc=$?" >> $O/pytest_flags_cuda.txt; tail -3 $O/pytest_flags_cuda.txt
DITRON_PULL_FLAGS=1 timeout 200 python3 -m pytest -q -m gpu tests/ops/test_tp_gemm.py -k "cuda_graph" > $O/pytest_captured_flags.txt 2>&1
echo "rc=$?" >> $O/pytest_captured_flags.txt; tail -3 $O/pytest_captured_flags.txt
