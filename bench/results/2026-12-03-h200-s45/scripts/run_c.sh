#!/usr/bin/env bash
# s45c: the grouped GEMM's tile configs at decode / small-prefill sizes (128 and 1024
# tokens), pointer loads with 64-row tiles added (s45b: pointer loads beat TMA at 128).
set -u
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 DITRON_LAUNCH_TIMEOUT=120
O=$OUT/s45c; mkdir -p $O
for T in 128 1024; do
  timeout 130 python -m ditron bench moe --world-size 1 --parts gemm --sweep --tokens $T \
    --out $O/gemm_sweep_$T.json > $O/gemm_sweep_$T.txt 2>&1
  echo "rc=$?" >> $O/gemm_sweep_$T.txt; tail -6 $O/gemm_sweep_$T.txt
done
