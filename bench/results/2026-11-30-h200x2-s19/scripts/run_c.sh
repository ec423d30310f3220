#!/bin/bash
# s19c: chunking of the graph-safe pushes at 64-256 MB (taper threshold, chunk size); the tuned
# GEMM-RS benchmark under graphs with the copy engine's side streams at high priority
export PYTHONPATH=$PWD NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
O=$OUT/s19c; mkdir -p $O
E=ditron.ops.exchange
D="DITRON_PULL_CHUNK_BYTES=,$E.TAPER_GRAPH_MIN_BYTES=67108864"
for op in all_gather reduce_scatter; do
DITRON_HEAP_SIZE=4G timeout 130 python3 bench/collective_ab.py --op $op --engine copy_engine --sizes 64M,96M,128M,256M \
  --variant pull:$D,$E.GATHER_BY=\'pull\' \
  --variant push:$D,$E.GATHER_BY=\'push\' \
  --variant t16:$D,$E.GATHER_BY=\'push\',$E.TAPER_GRAPH_MIN_BYTES=16777216 \
  --variant c32t16:$D,$E.GATHER_BY=\'push\',$E.TAPER_GRAPH_MIN_BYTES=16777216,DITRON_PULL_CHUNK_BYTES=33554432 \
  --out $O/$op.json > $O/$op.txt 2>&1; echo "rc=$?" >> $O/$op.txt
cat $O/$op.txt
done
DITRON_CACHE_DIR=$(mktemp -d) timeout 230 python3 -m ditron bench tp-gemm --world-size 2 --ops rs --tune --graphs --out $O/tp_rs > $O/tp_rs.txt 2>&1; echo "rc=$?" >> $O/tp_rs.txt
tail -25 $O/tp_rs.txt
