#!/bin/bash
# s14h: GEMM-RS (all shapes) and AG-GEMM (the two smallest) after a fresh tuner pass on
# the session's final code.
export PYTHONPATH=$PWD NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
D=$OUT/s14h; mkdir -p $D/cache
export DITRON_CACHE_DIR=$D/cache
timeout 150 python3 -m ditron bench tp-gemm --world-size 2 --ops rs --tune --graphs \
  --out $D/rs > $D/tp_rs.txt 2> $D/tp_rs.err; echo "rs rc=$?" >> $D/tp_rs.txt
timeout 120 python3 -m ditron bench tp-gemm --world-size 2 --ops ag --tune --graphs \
  --shapes 11008x4096,14336x4096 \
  --out $D/ag > $D/tp_ag.txt 2> $D/tp_ag.err; echo "ag rc=$?" >> $D/tp_ag.txt
rm -rf $D/cache
grep -v "^\s*$" $D/tp_rs.txt | tail -14; grep -v "^\s*$" $D/tp_ag.txt | tail -14
