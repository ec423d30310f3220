#!/bin/bash
# s13i (lab, uncommitted code): the pushed copy-engine GEMM-RS with its GEMMs on the
# persistent Triton GEMM (128x128x64 tiles, 4 warps, 4 stages: LAB_RS_GEMM) against
# cuBLAS, alternating processes, with s13f's tuned decisions.
export PYTHONPATH=$PWD NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
R=$OUT/s13i; mkdir -p $R/cache
cp bench/results/2026-11-30-h200x2-s13/s13f/cache/tune.json $R/cache/
git log -1 --format=%H > $R/commit.txt; git diff >> $R/commit.txt
for round in 1 2; do
  for lab in cublas triton; do
    if [ $lab = triton ]; then export LAB_RS_GEMM=128,128,64,4,4; else unset LAB_RS_GEMM; fi
    DITRON_CACHE_DIR=$R/cache timeout 120 python3 -m ditron bench tp-gemm --world-size 2 \
      --ops rs --shapes 3584x14336,4096x11008 --graphs --out $R/$lab$round \
      > $R/${lab}_$round.txt 2>&1
    echo "$lab $round rc=$?"; grep "^gemm_rs" $R/${lab}_$round.txt
  done
done
