#!/bin/bash
# session 8, call e (2 H200s): the TP GEMMs after the tuner (transposed b, confirmation
# whatever wins the first pass, rotating orders), eager and under CUDA graphs
export PYTHONPATH=$PWD NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
R=$OUT/s8e; mkdir -p $R
export DITRON_CACHE_DIR=$R/cache
timeout 280 python3 -m ditron bench tp-gemm --world-size 2 --ops rs --tune --graphs --out $R/tp_gemm_rs > $R/tp_gemm_rs.txt 2>&1; echo "rc=$?" >> $R/tp_gemm_rs.txt
timeout 280 python3 -m ditron bench tp-gemm --world-size 2 --ops ag --tune --graphs --out $R/tp_gemm_ag > $R/tp_gemm_ag.txt 2>&1; echo "rc=$?" >> $R/tp_gemm_ag.txt
cd $OUT && tar czf s8e.tgz s8e && rm -rf s8e
