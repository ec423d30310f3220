#!/usr/bin/env bash
# s40d: the fused kernels' block size (DITRON_FUSED_BLOCK; elements per block, default by
# size) against element width, for the sums that cannot be widened (uint8) and the 8-byte
# sums (bench/dtype_cost.py, one rank on the H200).
set -u
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
O=$OUT/s40d; mkdir -p $O
{ git log --oneline -1; git status --short; nvidia-smi -L; } > $O/commit.txt
for B in default 1024 2048 4096 8192 16384 32768; do
  echo "== DITRON_FUSED_BLOCK=$B"
  if [ $B = default ]; then unset DITRON_FUSED_BLOCK; else export DITRON_FUSED_BLOCK=$B; fi
  timeout 100 python bench/dtype_cost.py --sizes 1M,16M,64M --ops reduce_scatter,all_reduce,all_gather \
    --dtypes bf16,fp32,uint8,int64,fp64 --json $O/block_$B.json 2>&1 | tail -n +2
done > $O/blocks.txt
cat $O/blocks.txt
