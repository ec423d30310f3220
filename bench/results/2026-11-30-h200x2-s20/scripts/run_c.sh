#!/bin/bash
# s20c: graph-safe exchanges acknowledging as each call starts (no end-of-call notify),
# no acknowledgement waits inside a capture, early pushes: GPU tests, A/B, timeline at 96 MB
export PYTHONPATH=$PWD NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
O=$OUT/s20c; mkdir -p $O
git log --oneline -1 > $O/commit.txt; git status --short >> $O/commit.txt
timeout 240 python3 -m pytest -q -m gpu tests/ops/test_collectives.py tests/ops/test_tp_gemm.py -k "graph or chunked" > $O/gpu_tests.txt 2>&1; echo "rc=$?" >> $O/gpu_tests.txt
tail -3 $O/gpu_tests.txt
E=ditron.ops.exchange
for op in all_gather reduce_scatter; do
DITRON_HEAP_SIZE=6G timeout 150 python3 bench/collective_ab.py --op $op --engine copy_engine --sizes 64M,96M,128M,256M,1G --rounds 4 \
  --variant wait:$E.GRAPH_HALVES=1,$E.ACK_BY_DATA=False,$E.EARLY_PUSHES=False \
  --variant bydata:$E.GRAPH_HALVES=2,$E.ACK_BY_DATA=True,$E.EARLY_PUSHES=False \
  --variant new:$E.GRAPH_HALVES=2,$E.ACK_BY_DATA=True,$E.EARLY_PUSHES=True \
  --out $O/$op.json > $O/$op.txt 2>&1; echo "rc=$?" >> $O/$op.txt
grep graph $O/$op.txt; tail -1 $O/$op.txt
done
DITRON_HEAP_SIZE=4G timeout 60 python3 bench/results/2026-11-30-h200x2-s19/scripts/graph_timeline.py 100663296 "ag-push-1-s,rs-push-1-s" > $O/timeline.txt 2>&1; echo "rc=$?" >> $O/timeline.txt
grep "==\|rc=" $O/timeline.txt
