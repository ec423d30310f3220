#!/bin/bash
# s18a: copy-engine ceilings both ways (pull / push / mix x streams); the two-half graph-safe inbox A/B
export PYTHONPATH=$PWD NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
O=$OUT/s18a; mkdir -p $O
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv > $O/gpus.txt
DITRON_HEAP_SIZE=3G timeout 120 python3 bench/results/2026-11-30-h200x2-s18/scripts/ce_lab.py > $O/ce_lab.txt 2>&1; echo "rc=$?" >> $O/ce_lab.txt
E=ditron.ops.exchange
for op in all_gather reduce_scatter; do
DITRON_HEAP_SIZE=6G timeout 200 python3 bench/collective_ab.py --op $op --engine copy_engine --sizes 64M,96M,256M,512M \
  --variant one:$E.GRAPH_HALVES=1 --variant two:$E.GRAPH_HALVES=2 \
  --out $O/$op.json > $O/$op.txt 2>&1; echo "rc=$?" >> $O/$op.txt
done
