#!/bin/bash
# session 8, call b (2 H200s): AG-GEMM under CUDA graphs with one GEMM program fewer than
# SMs (is the graph-safe push wait's spinning kernel holding an SM?), then the TP GEMMs after
# the tuner with the confirmation set of session 7 (AG-GEMM under graphs too)
export PYTHONPATH=$PWD NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
R=$OUT/s8b; mkdir -p $R
timeout 150 python3 lab_s8/ag_graph_lab.py > $R/ag_graph_lab.txt 2>&1; echo "rc=$?" >> $R/ag_graph_lab.txt
export DITRON_CACHE_DIR=$R/cache
timeout 200 python3 -m ditron bench tp-gemm --world-size 2 --ops ag --tune --graphs --out $R/tp_gemm_ag > $R/tp_gemm_ag.txt 2>&1; echo "rc=$?" >> $R/tp_gemm_ag.txt
timeout 200 python3 -m ditron bench tp-gemm --world-size 2 --ops rs --tune --out $R/tp_gemm_rs > $R/tp_gemm_rs.txt 2>&1; echo "rc=$?" >> $R/tp_gemm_rs.txt
cd $OUT && tar czf s8b.tgz s8b && rm -rf s8b
