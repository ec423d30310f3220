#!/bin/bash
# s25c: split_rows_for on one H200; tp-gemm CPU-style tests on the CUDA backend, 2 ranks sharing the GPU
export PYTHONPATH=$PWD NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
O=$OUT/s25c; mkdir -p $O
{ git log --oneline -1; git status --short; nvidia-smi -L; } > $O/commit.txt
timeout 120 python3 scripts/split_pick.py > $O/split_pick.txt 2>&1
echo "rc=$?" >> $O/split_pick.txt; cat $O/split_pick.txt
TORCH_SYMM_MEM_ALLOW_OVERLAPPING_DEVICES=1 timeout 300 python3 -m pytest -q --ditron-backend cuda tests/ops/test_tp_gemm.py \
  -k "pulled_matches_torch and 2 or engines_agree_with_torch and 2 or graph_safe_variants_match_torch and 2 or split_rows or per_mode" > $O/pytest_cuda_shared.txt 2>&1
echo "rc=$?" >> $O/pytest_cuda_shared.txt; tail -5 $O/pytest_cuda_shared.txt
