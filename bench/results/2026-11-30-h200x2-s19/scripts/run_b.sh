#!/bin/bash
# s19b: the copy engine's side streams at high priority: timelines under graph replay at 1 GB,
# A/B of the graph-safe all-gather / reduce-scatter against the default priority
export PYTHONPATH=$PWD NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
O=$OUT/s19b; mkdir -p $O
DITRON_HEAP_SIZE=8G timeout 100 python3 bench/results/2026-11-30-h200x2-s19/scripts/graph_timeline.py 1073741824 "ag-push-1,ag-push-2,ag-push-1-s,ag-pull-3,rs-pull-2,rs-pull-1-s" > $O/timeline.txt 2>&1; echo "rc=$?" >> $O/timeline.txt
grep "==" $O/timeline.txt
E=ditron.ops.exchange
C=ditron.engines.copy_engine.PRIORITY
P="$E.GATHER_BY='push',$E.PUSH_SIGNAL_LANE=False,$C=-8"
DITRON_HEAP_SIZE=8G timeout 200 python3 bench/collective_ab.py --op all_gather --engine copy_engine --sizes 96M,256M,512M,1G \
  --variant pull0:$E.GATHER_BY=\'pull\',$C=0 \
  --variant pull:$E.GATHER_BY=\'pull\',$C=-8 \
  --variant p1:$P,$E.PUSH_LANES=1 \
  --variant p2:$P,$E.PUSH_LANES=2 \
  --variant p1s:$P,$E.PUSH_LANES=1,$E.PUSH_SIGNAL_LANE=True \
  --out $O/ag_ce.json > $O/ag_ce.txt 2>&1; echo "rc=$?" >> $O/ag_ce.txt
cat $O/ag_ce.txt
DITRON_HEAP_SIZE=8G timeout 160 python3 bench/collective_ab.py --op reduce_scatter --engine copy_engine --sizes 96M,256M,512M,1G \
  --variant l2p0:$E.PUSH_LANES=2,$E.PUSH_SIGNAL_LANE=False,$C=0 \
  --variant l2:$E.PUSH_LANES=2,$E.PUSH_SIGNAL_LANE=False,$C=-8 \
  --variant l1s:$E.PUSH_LANES=1,$E.PUSH_SIGNAL_LANE=True,$C=-8 \
  --variant l2s:$E.PUSH_LANES=2,$E.PUSH_SIGNAL_LANE=True,$C=-8 \
  --out $O/rs_ce.json > $O/rs_ce.txt 2>&1; echo "rc=$?" >> $O/rs_ce.txt
cat $O/rs_ce.txt
