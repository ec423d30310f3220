#!/bin/bash
# s20b: graph-safe pushes without acknowledgement waits inside a capture (two halves,
# ACK_BY_DATA) and starting before the epoch bump (EARLY_PUSHES): GPU tests, A/B against the
# session 19 settings, timeline at 96 MB
export PYTHONPATH=$PWD NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
O=$OUT/s20b; mkdir -p $O
git log --oneline -1 > $O/commit.txt; git status --short >> $O/commit.txt
timeout 200 python3 -m pytest -q -m gpu tests/ops/test_collectives.py > $O/gpu_tests.txt 2>&1; echo "rc=$?" >> $O/gpu_tests.txt
tail -3 $O/gpu_tests.txt
E=ditron.ops.exchange
OLD="$E.GRAPH_HALVES=1,$E.ACK_BY_DATA=False,$E.EARLY_PUSHES=False"
for op in all_gather reduce_scatter; do
DITRON_HEAP_SIZE=4G timeout 170 python3 bench/collective_ab.py --op $op --engine copy_engine --sizes 64M,96M,128M,256M --rounds 4 \
  --variant old:$OLD \
  --variant h2:$E.GRAPH_HALVES=2,$E.ACK_BY_DATA=False,$E.EARLY_PUSHES=False \
  --variant bydata:$E.GRAPH_HALVES=2,$E.ACK_BY_DATA=True,$E.EARLY_PUSHES=False \
  --variant new:$E.GRAPH_HALVES=2,$E.ACK_BY_DATA=True,$E.EARLY_PUSHES=True \
  --out $O/$op.json > $O/$op.txt 2>&1; echo "rc=$?" >> $O/$op.txt
grep graph $O/$op.txt; tail -1 $O/$op.txt
done
DITRON_HEAP_SIZE=4G timeout 60 python3 bench/results/2026-11-30-h200x2-s19/scripts/graph_timeline.py 100663296 "ag-push-1-s,rs-push-1-s" > $O/timeline.txt 2>&1; echo "rc=$?" >> $O/timeline.txt
grep "==\|rc=" $O/timeline.txt
