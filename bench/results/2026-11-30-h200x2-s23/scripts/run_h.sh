#!/bin/bash
# s23h: the tuner's confirmed graph pass on GPU: GEMM-RS on two shapes, tuned, eager and graphs
export PYTHONPATH=$PWD NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
O=$OUT/s23h; mkdir -p $O
git log --oneline -1 > $O/commit.txt; git status --short >> $O/commit.txt
DITRON_CACHE_DIR=$(mktemp -d) timeout 200 python3 -m ditron bench tp-gemm --world-size 2 --ops rs --tune --graphs \
  --shapes 4608x36864,4096x11008 --out $O/tp_rs > $O/tp_rs.txt 2>&1
echo "rc=$?" >> $O/tp_rs.txt
tr '\r' '\n' < $O/tp_rs.txt | grep "graph \|under CUDA\|confirmed" | head -40
grep -v "^\[ditron tune\]" $O/tp_rs.txt | tail -14
