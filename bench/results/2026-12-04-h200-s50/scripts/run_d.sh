#!/usr/bin/env bash
# s50d: A/B of the consumer wait tables indexed by row block (after order[i]) or by tile slot
set -u
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 DITRON_LAUNCH_TIMEOUT=150
O=$OUT/s50d; mkdir -p $O
{ git log --oneline -1; git status --short; nvidia-smi -L; } > $O/commit.txt
for r in 1 2 3; do
  timeout 150 python bench/gemm_lab.py --out $O/lab$r > $O/gemm_lab$r.txt 2>&1; echo "rc=$?" >> $O/gemm_lab$r.txt
  grep -E "cublas|flat\+tstore|rc=" $O/gemm_lab$r.txt | grep -v '^{'
done
t() { name=$1; lim=$2; shift 2
  timeout $lim python -m pytest -v -p no:cacheprovider "$@" > $O/$name.txt 2>&1
  echo "rc=$?" >> $O/$name.txt; echo "== $name"; grep -E "FAIL|passed|failed|rc=" $O/$name.txt | tail -4; }
