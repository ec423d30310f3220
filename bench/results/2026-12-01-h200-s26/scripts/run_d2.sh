#!/bin/bash
# s26d2 (two H200s): the graph-safe pulled GEMM-RS (the alt column) with its chunk flags off and on
export PYTHONPATH=$PWD NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
O=$OUT/s26d2; mkdir -p $O
{ git log --oneline -1; git status --short; nvidia-smi -L; } > $O/commit.txt
for f in 0 1; do
  DITRON_PULL_FLAGS=$f DITRON_CACHE_DIR=$(mktemp -d) timeout 150 python3 -m ditron bench tp-gemm --world-size 2 --ops rs --graphs \
    --shapes 4608x36864,4096x11008 --out $O/flags$f > $O/flags$f.txt 2>&1
  echo "rc=$?" >> $O/flags$f.txt; echo "== flags $f"; tail -8 $O/flags$f.txt
done
