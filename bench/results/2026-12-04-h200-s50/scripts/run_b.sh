#!/usr/bin/env bash
# s50b: issue 4's single-GPU targets on the current code: the local persistent GEMM against
# cuBLAS, and the consumer GEMM (one chunk wait per tile, every chunk arrived) against the
# same GEMM without waits, on the per-rank shapes of REFERENCES.md (bench/gemm_lab.py's
# defaults; last measured in session 2, before the waits polled once per program).
set -u
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
O=$OUT/s50b; mkdir -p $O
{ git log --oneline -1; git status --short; nvidia-smi -L; } > $O/commit.txt
timeout 500 python bench/gemm_lab.py --out $O > $O/gemm_lab.txt 2>&1; echo "rc=$?" >> $O/gemm_lab.txt
tail -60 $O/gemm_lab.txt | grep -v '^{'
