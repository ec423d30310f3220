#!/bin/bash
# s20a: the SM engine's fused all-gather / reduce-scatter with more programs than SMs (so that
# one program's publish overlaps another's pulls), push vs pull; the copy engine's graph-safe
# all-gather timeline at 96 MB
export PYTHONPATH=$PWD NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
O=$OUT/s20a; mkdir -p $O
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv > $O/gpu.txt
V="DITRON_FUSED_PUSH=,DITRON_FUSED_BLOCK=,DITRON_FUSED_WARPS=,DITRON_FUSED_PROGRAMS="
DITRON_HEAP_SIZE=4G timeout 200 python3 bench/collective_ab.py --op all_gather --engine sm --sizes 64M,96M,128M,256M --rounds 4 \
  --variant base:$V \
  --variant p264:$V,DITRON_FUSED_PROGRAMS=264 \
  --variant p528:$V,DITRON_FUSED_PROGRAMS=528 \
  --variant p528w8:$V,DITRON_FUSED_PROGRAMS=528,DITRON_FUSED_WARPS=8 \
  --variant p1056w8:$V,DITRON_FUSED_PROGRAMS=1056,DITRON_FUSED_WARPS=8 \
  --variant push264:$V,DITRON_FUSED_PUSH=1,DITRON_FUSED_PROGRAMS=264 \
  --out $O/ag_sm.json > $O/ag_sm.txt 2>&1; echo "rc=$?" >> $O/ag_sm.txt
cat $O/ag_sm.txt
DITRON_HEAP_SIZE=4G timeout 90 python3 bench/collective_ab.py --op reduce_scatter --engine sm --sizes 64M,96M,128M --rounds 4 \
  --variant base:$V \
  --variant p264:$V,DITRON_FUSED_PROGRAMS=264 \
  --variant p528w8:$V,DITRON_FUSED_PROGRAMS=528,DITRON_FUSED_WARPS=8 \
  --out $O/rs_sm.json > $O/rs_sm.txt 2>&1; echo "rc=$?" >> $O/rs_sm.txt
cat $O/rs_sm.txt
DITRON_HEAP_SIZE=4G timeout 60 python3 bench/results/2026-11-30-h200x2-s19/scripts/graph_timeline.py 100663296 "ag-push-1-s" > $O/timeline.txt 2>&1; echo "rc=$?" >> $O/timeline.txt
grep -c . $O/timeline.txt
