#!/bin/bash
# s19a: timelines of the graph-safe exchanges under graph replay at 1 GB; A/B of the pushed
# all-gather under graphs (halves, lanes, signal lane) and of the reduce-scatter at 96/512 MB
export PYTHONPATH=$PWD NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
O=$OUT/s19a; mkdir -p $O
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv > $O/gpu.txt
DITRON_HEAP_SIZE=8G timeout 120 python3 bench/results/2026-11-30-h200x2-s19/scripts/graph_timeline.py 1073741824 "ag push L1,ag push L1 S,ag push L1 H2,ag pull,rs L2,rs L1 S" > $O/timeline.txt 2>&1; echo "rc=$?" >> $O/timeline.txt
grep "==" $O/timeline.txt
E=ditron.ops.exchange
B="$E.GATHER_BY='push',$E.GRAPH_HALVES=1,$E.PUSH_SIGNAL_LANE=False"
DITRON_HEAP_SIZE=8G timeout 150 python3 bench/collective_ab.py --op all_gather --engine copy_engine --sizes 96M,256M,1G \
  --variant pull:$E.GATHER_BY=\'pull\',$E.GRAPH_HALVES=1,$E.PUSH_LANES=2,$E.PUSH_SIGNAL_LANE=False \
  --variant p1:$B,$E.PUSH_LANES=1 \
  --variant p1h2:$B,$E.PUSH_LANES=1,$E.GRAPH_HALVES=2 \
  --variant p1s:$B,$E.PUSH_LANES=1,$E.PUSH_SIGNAL_LANE=True \
  --variant p2s:$B,$E.PUSH_LANES=2,$E.PUSH_SIGNAL_LANE=True \
  --out $O/ag_ce.json > $O/ag_ce.txt 2>&1; echo "rc=$?" >> $O/ag_ce.txt
cat $O/ag_ce.txt
R="$E.GRAPH_HALVES=1,$E.PUSH_SIGNAL_LANE=False"
DITRON_HEAP_SIZE=8G timeout 100 python3 bench/collective_ab.py --op reduce_scatter --engine copy_engine --sizes 96M,512M \
  --variant l2:$R,$E.PUSH_LANES=2 \
  --variant l2s:$R,$E.PUSH_LANES=2,$E.PUSH_SIGNAL_LANE=True \
  --variant l1s:$R,$E.PUSH_LANES=1,$E.PUSH_SIGNAL_LANE=True \
  --variant l2h2:$R,$E.PUSH_LANES=2,$E.GRAPH_HALVES=2 \
  --out $O/rs_ce.json > $O/rs_ce.txt 2>&1; echo "rc=$?" >> $O/rs_ce.txt
cat $O/rs_ce.txt
