#!/usr/bin/env bash
# s52a: sort_copies before (4816b60) / after the int32 placement (routing_ab.py); the
# dispatch bench twice (s51g: the companion tiles capped, not timed in session 51);
# gemm_lab twice on the two K/N = 1376 shapes with the new "lab swap" yardstick.
set -u
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 DITRON_LAUNCH_TIMEOUT=150
O=$OUT/s52a; mkdir -p $O
{ git log --oneline -1; git status --short; nvidia-smi -L; } > $O/commit.txt
timeout 120 python bench/results/2026-12-04-h200-s52/scripts/routing_ab.py --old 4816b60 > $O/routing.txt 2>&1
echo "rc=$?" >> $O/routing.txt; cat $O/routing.txt
for r in 1 2; do
  timeout 120 python -m ditron bench moe --parts dispatch --layer-tokens 128,8192 --out $O/dispatch$r.json > $O/bench$r.txt 2>&1
  echo "rc=$?" >> $O/bench$r.txt; grep -E "^dispatch|rc=" $O/bench$r.txt
done
for r in 1 2; do
  mkdir -p $O/lab$r
  timeout 200 python bench/gemm_lab.py --shapes 8192x1376x4096,8192x4096x1376 --out $O/lab$r > $O/lab$r.txt 2>&1
  echo "rc=$?" >> $O/lab$r.txt; grep -E "x cuBLAS|^8192|FAILED|rc=" $O/lab$r.txt | grep -v '^{'
done
