#!/bin/bash
# s20f: the SM engine's fused all-gather / reduce-scatter eagerly and under graphs at 64-128 MB:
# more programs than SMs, and (reduce-scatter) one launch instead of pieces
export PYTHONPATH=$PWD NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
O=$OUT/s20f; mkdir -p $O
git log --oneline -1 > $O/commit.txt; git status --short >> $O/commit.txt
V="DITRON_FUSED_PROGRAMS=,ditron.ops.collectives.FUSED_MAX_ELEMENTS=16777216"
DITRON_HEAP_SIZE=4G timeout 80 python3 bench/collective_ab.py --op all_gather --engine sm --sizes 64M,96M,128M --rounds 4 \
  --variant base:$V --variant p528:$V,DITRON_FUSED_PROGRAMS=528 \
  --out $O/ag_sm.json > $O/ag_sm.txt 2>&1; echo "rc=$?" >> $O/ag_sm.txt
cat $O/ag_sm.txt
DITRON_HEAP_SIZE=4G timeout 100 python3 bench/collective_ab.py --op reduce_scatter --engine sm --sizes 64M,96M,128M --rounds 4 \
  --variant base:$V --variant p264:$V,DITRON_FUSED_PROGRAMS=264 \
  --variant one:$V,ditron.ops.collectives.FUSED_MAX_ELEMENTS=67108864 \
  --out $O/rs_sm.json > $O/rs_sm.txt 2>&1; echo "rc=$?" >> $O/rs_sm.txt
cat $O/rs_sm.txt
