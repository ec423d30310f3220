#!/bin/bash
# s23f: the TP GEMMs after the tuner on this session's code (GEMM-RS, then AG-GEMM), eager and graphs
export PYTHONPATH=$PWD NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
O=$OUT/s23f; mkdir -p $O
git log --oneline -1 > $O/commit.txt; git status --short >> $O/commit.txt
DITRON_CACHE_DIR=$(mktemp -d) timeout 270 python3 -m ditron bench tp-gemm --world-size 2 --ops rs --tune --graphs --out $O/tp_rs > $O/tp_rs.txt 2>&1
echo "rc=$?" >> $O/tp_rs.txt
grep -v "^\[ditron tune\]" $O/tp_rs.txt | tail -22
DITRON_CACHE_DIR=$(mktemp -d) timeout 290 python3 -m ditron bench tp-gemm --world-size 2 --ops ag --tune --graphs --out $O/tp_ag > $O/tp_ag.txt 2>&1
echo "rc=$?" >> $O/tp_ag.txt
grep -v "^\[ditron tune\]" $O/tp_ag.txt | tail -22
