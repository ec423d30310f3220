#!/bin/bash
# s26c (one H200, two ranks sharing it): GPU tests of the TP GEMMs and the CPU suite's pulled
# GEMM-RS tests on the CUDA backend after the prologue change; the prologue lab again
export PYTHONPATH=$PWD NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export TORCH_SYMM_MEM_ALLOW_OVERLAPPING_DEVICES=1
O=$OUT/s26c; mkdir -p $O
{ git log --oneline -1; git status --short; nvidia-smi -L; } > $O/commit.txt
timeout 80 python3 scripts/prologue_lab.py 8192,4096,11008 cuda > $O/prologue.txt 2>&1
echo "rc=$?" >> $O/prologue.txt; grep "rank\|rc=" $O/prologue.txt
timeout 150 python3 -m pytest -q -m gpu tests/ops/test_tp_gemm.py > $O/pytest_gpu.txt 2>&1
echo "rc=$?" >> $O/pytest_gpu.txt; tail -2 $O/pytest_gpu.txt
timeout 200 python3 -m pytest -q --ditron-backend cuda tests/ops/test_tp_gemm.py \
  -k "pulled_matches or engines_agree or per_mode" > $O/pytest_cuda.txt 2>&1
echo "rc=$?" >> $O/pytest_cuda.txt; tail -2 $O/pytest_cuda.txt
