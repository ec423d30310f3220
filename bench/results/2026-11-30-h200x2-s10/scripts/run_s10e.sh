#!/bin/bash
# s10e: the two small GEMM-RS shapes again with s10c's tuned decisions, twice in a row
# (s10d's first shape measured auto at 0.94x the baseline eagerly; s10c 1.21x).
export PYTHONPATH=$PWD NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
R=$OUT/s10e; mkdir -p $R/cache
cp bench/results/2026-11-30-h200x2-s10/s10c/cache/tune.json $R/cache/
for i in 1 2; do
  nvidia-smi --query-gpu=name,clocks.sm,temperature.gpu --format=csv > $R/smi_$i.txt 2>&1
  DITRON_CACHE_DIR=$R/cache timeout 150 python3 -m ditron bench tp-gemm --world-size 2 --ops rs --shapes 4096x11008,4096x14336 --graphs --out $R/tp_rs_$i > $R/tp_rs_$i.txt 2>&1; echo "rc=$?" >> $R/tp_rs_$i.txt
done
cd $OUT && tar czf s10e.tgz s10e && rm -rf s10e
