#!/bin/bash
# s19e: the all-gather under graphs at 64-128 MB (two inbox halves, chunk size, smaller last
# chunk); the tuned AG-GEMM benchmark on the session's code
export PYTHONPATH=$PWD NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
O=$OUT/s19e; mkdir -p $O
E=ditron.ops.exchange
D="DITRON_PULL_CHUNK_BYTES=,$E.GRAPH_HALVES=1,$E.TAPER_DIVISOR=16"
DITRON_HEAP_SIZE=4G timeout 110 python3 bench/collective_ab.py --op all_gather --engine copy_engine --sizes 64M,96M,128M \
  --variant push:$D \
  --variant h2:$D,$E.GRAPH_HALVES=2 \
  --variant c32:$D,DITRON_PULL_CHUNK_BYTES=33554432 \
  --variant d64:$D,$E.TAPER_DIVISOR=64 \
  --variant h2d64:$D,$E.GRAPH_HALVES=2,$E.TAPER_DIVISOR=64 \
  --out $O/ag_ce.json > $O/ag_ce.txt 2>&1; echo "rc=$?" >> $O/ag_ce.txt
cat $O/ag_ce.txt
DITRON_CACHE_DIR=$(mktemp -d) timeout 300 python3 -m ditron bench tp-gemm --world-size 2 --ops ag --tune --graphs --out $O/tp_ag > $O/tp_ag.txt 2>&1; echo "rc=$?" >> $O/tp_ag.txt
tail -22 $O/tp_ag.txt
