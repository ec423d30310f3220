#!/usr/bin/env bash
# s51g: as s51f (the dispatch bench, scales along the rows' routes and in an exchange of
# their own, twice), with the companion rows in tiles of at most half the rows' elements
# (the finishing kernel's registers 198 -> 60 at these shapes, ptxas for sm_90a).
set -u
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 DITRON_LAUNCH_TIMEOUT=150
O=$OUT/s51g; mkdir -p $O
{ git log --oneline -1; git status --short; nvidia-smi -L; } > $O/commit.txt
for r in 1 2; do
  timeout 120 python -m ditron bench moe --parts dispatch --layer-tokens 128,8192 --out $O/dispatch$r.json > $O/bench$r.txt 2>&1
  echo "rc=$?" >> $O/bench$r.txt; grep -E "^dispatch|rc=" $O/bench$r.txt
done
