#!/usr/bin/env bash
# s47b: the two pulled GEMM-RS mark tests that failed in s47a (details), and the TP GEMM
# tests s47a's cap cut (CUDA graph under inference_mode, own rows read in place).
set -u
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 DITRON_LAUNCH_TIMEOUT=150
O=$OUT/s47b; mkdir -p $O
{ git log --oneline -1; git status --short; nvidia-smi -L; } > $O/commit.txt
timeout 120 python -m pytest -v -p no:cacheprovider --ditron-backend cuda tests/ops/test_tp_gemm.py \
  -k "starts_spinning" --tb=long > $O/marks.txt 2>&1; echo "rc=$?" >> $O/marks.txt
grep -E "^E |passed|failed|rc=" $O/marks.txt | head -30
timeout 200 python -m pytest -v -p no:cacheprovider --ditron-backend cuda tests/ops/test_tp_gemm.py \
  -k "cuda_graph and True or reads_own_rows_in_place_gpu" > $O/rest.txt 2>&1; echo "rc=$?" >> $O/rest.txt
grep -E "FAIL|passed|failed|rc=" $O/rest.txt | tail -5
