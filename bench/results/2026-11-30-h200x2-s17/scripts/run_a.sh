#!/bin/bash
# s17a: the copy-engine all-gather's pulls: lanes x tapered first chunks; the fused SM all-gather's variants
export PYTHONPATH=$PWD NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 DITRON_HEAP_SIZE=6G
O=$OUT/s17a; mkdir -p $O
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv > $O/gpus.txt
E=ditron.ops.exchange
timeout 330 python3 bench/collective_ab.py --op all_gather --engine copy_engine --sizes 64M,96M,256M,512M,1G \
  --variant l2:$E.PULL_LANES=2,$E.PULL_TAPER=False \
  --variant l2t:$E.PULL_LANES=2,$E.PULL_TAPER=True,$E.TAPER_MIN_BYTES=0 \
  --variant l3t:$E.PULL_LANES=3,$E.PULL_TAPER=True,$E.TAPER_MIN_BYTES=0 \
  --variant l4t:$E.PULL_LANES=4,$E.PULL_TAPER=True,$E.TAPER_MIN_BYTES=0 \
  --variant l4:$E.PULL_LANES=4,$E.PULL_TAPER=False \
  --out $O/ag_ce.json > $O/ag_ce.txt 2>&1
echo "rc=$?" >> $O/ag_ce.txt
timeout 200 python3 bench/collective_ab.py --op all_gather --engine sm --sizes 64M,96M,256M \
  --variant def:DITRON_FUSED_BLOCK=,DITRON_FUSED_WARPS=,DITRON_FUSED_PROGRAMS=,DITRON_FUSED_PUSH= \
  --variant b32k:DITRON_FUSED_BLOCK=32768,DITRON_FUSED_WARPS=,DITRON_FUSED_PROGRAMS=,DITRON_FUSED_PUSH= \
  --variant w8:DITRON_FUSED_BLOCK=16384,DITRON_FUSED_WARPS=8,DITRON_FUSED_PROGRAMS=,DITRON_FUSED_PUSH= \
  --variant p64:DITRON_FUSED_BLOCK=,DITRON_FUSED_WARPS=,DITRON_FUSED_PROGRAMS=64,DITRON_FUSED_PUSH= \
  --variant push:DITRON_FUSED_BLOCK=,DITRON_FUSED_WARPS=,DITRON_FUSED_PROGRAMS=,DITRON_FUSED_PUSH=1 \
  --out $O/ag_sm.json > $O/ag_sm.txt 2>&1
echo "rc=$?" >> $O/ag_sm.txt
