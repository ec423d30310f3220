#!/bin/bash
# s16a: tuned GEMM-RS and AG-GEMM benchmarks on the session-15 final code.
export PYTHONPATH=$PWD NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
mkdir -p $OUT/s16a
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv > $OUT/s16a/gpus.txt
DITRON_CACHE_DIR=$OUT/s16a/cache timeout 280 python3 -m ditron bench tp-gemm --world-size 2 --ops rs --tune --graphs --out $OUT/s16a/tp_rs > $OUT/s16a/tp_rs.txt 2>&1
echo "rs rc=$?" >> $OUT/s16a/tp_rs.txt
DITRON_CACHE_DIR=$OUT/s16a/cache timeout 290 python3 -m ditron bench tp-gemm --world-size 2 --ops ag --tune --graphs --out $OUT/s16a/tp_ag > $OUT/s16a/tp_ag.txt 2>&1
echo "ag rc=$?" >> $OUT/s16a/tp_ag.txt
tail -30 $OUT/s16a/tp_rs.txt $OUT/s16a/tp_ag.txt
