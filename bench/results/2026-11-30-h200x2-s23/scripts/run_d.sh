#!/bin/bash
# s23d: the tma engine's defaults (128-row boxes, 3 stages) against sm, engine level; AG-GEMM A/B again
export PYTHONPATH=$PWD NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export DITRON_LAUNCH_TIMEOUT=150
O=$OUT/s23d; mkdir -p $O
git log --oneline -1 > $O/commit.txt; git status --short >> $O/commit.txt
LAB_SET=defaults LAB_SIZES=16,64,256 DITRON_HEAP_SIZE=4G timeout 150 python3 scripts/tma_lab.py > $O/tma_lab.txt 2>&1
echo "tma_lab rc=$?" >> $O/tma_lab.txt
timeout 250 python3 scripts/ag_tma_lab.py > $O/ag_tma_lab.txt 2>&1
echo "rc=$?" >> $O/ag_tma_lab.txt
cat $O/tma_lab.txt; cat $O/ag_tma_lab.txt
