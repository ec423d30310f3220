#!/bin/bash
# s18e: pushes over one or two lanes: the all-gather by pushes and the reduce-scatter
export PYTHONPATH=$PWD NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
O=$OUT/s18e; mkdir -p $O
E=ditron.ops.exchange
DITRON_HEAP_SIZE=8G timeout 200 python3 bench/collective_ab.py --op all_gather --engine copy_engine --sizes 96M,256M,512M,1G \
  --variant push1:$E.GATHER_BY=\'push\',$E.PUSH_LANES=1 --variant push2:$E.GATHER_BY=\'push\',$E.PUSH_LANES=2 \
  --out $O/ag_ce.json > $O/ag_ce.txt 2>&1; echo "rc=$?" >> $O/ag_ce.txt
DITRON_HEAP_SIZE=8G timeout 200 python3 bench/collective_ab.py --op reduce_scatter --engine copy_engine --sizes 96M,256M,512M,1G \
  --variant l1:$E.PUSH_LANES=1 --variant l2:$E.PUSH_LANES=2 \
  --out $O/rs_ce.json > $O/rs_ce.txt 2>&1; echo "rc=$?" >> $O/rs_ce.txt
