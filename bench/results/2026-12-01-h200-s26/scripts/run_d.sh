#!/bin/bash
# s26d (two H200s): GPU tests of the TP GEMMs; the tuned GEMM-RS bench on the three small shapes
export PYTHONPATH=$PWD NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
O=$OUT/s26d; mkdir -p $O
{ git log --oneline -1; git status --short; nvidia-smi -L; } > $O/commit.txt
timeout 150 python3 -m pytest -q -m gpu tests/ops/test_tp_gemm.py > $O/pytest_tp_gemm.txt 2>&1
echo "rc=$?" >> $O/pytest_tp_gemm.txt; tail -2 $O/pytest_tp_gemm.txt
DITRON_CACHE_DIR=$(mktemp -d) timeout 300 python3 -m ditron bench tp-gemm --world-size 2 --ops rs --tune --graphs \
  --shapes 3584x14336,4096x11008,4096x14336 --out $O/tp_rs > $O/tp_rs.txt 2>&1
echo "rc=$?" >> $O/tp_rs.txt
grep -v "ditron tune\] gemm_rs M=" $O/tp_rs.txt | tail -40
# the graph-safe pulled engine (the alt column) with its chunk flags off and on
