#!/bin/bash
# s23a: the tma engine against sm (engine level), then the collectives harness with tma
export PYTHONPATH=$PWD NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
O=$OUT/s23a; mkdir -p $O
git log --oneline -1 > $O/commit.txt; git status --short >> $O/commit.txt
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv > $O/gpu.txt
DITRON_HEAP_SIZE=4G timeout 200 python3 scripts/tma_lab.py > $O/tma_lab.txt 2>&1
echo "tma_lab rc=$?" >> $O/tma_lab.txt
timeout 300 python3 -m ditron bench collectives --world-size 2 --ops all_gather,reduce_scatter,all_to_all \
  --engines tma,sm,copy_engine --sizes 256K,1M,4M,16M,64M,256M --busy --graphs --graph-max 256M \
  --out $O/coll > $O/coll.txt 2>&1
echo "coll rc=$?" >> $O/coll.txt
tail -3 $O/*.txt
