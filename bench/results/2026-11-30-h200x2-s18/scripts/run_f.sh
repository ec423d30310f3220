#!/bin/bash
# s18f: GPU tests of the collectives on the all-gather by pushes (default now) and pushes over
# two lanes when graph-safe; A/B of those against pulls / one lane
export PYTHONPATH=$PWD NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
O=$OUT/s18f; mkdir -p $O
timeout 170 python3 -m pytest -m gpu -q tests/ops/test_collectives.py tests/ops/test_fused_collectives.py tests/engines/test_engines.py > $O/gpu_tests.txt 2>&1; echo "rc=$?" >> $O/gpu_tests.txt
tail -3 $O/gpu_tests.txt
E=ditron.ops.exchange
DITRON_HEAP_SIZE=8G timeout 65 python3 bench/collective_ab.py --op all_gather --engine copy_engine --sizes 256M,1G \
  --variant pull:$E.GATHER_BY=\'pull\' --variant p1:$E.GATHER_BY=\'push\',$E.PUSH_LANES=1 --variant p2:$E.GATHER_BY=\'push\',$E.PUSH_LANES=2 \
  --out $O/ag_ce.json > $O/ag_ce.txt 2>&1; echo "rc=$?" >> $O/ag_ce.txt
DITRON_HEAP_SIZE=8G timeout 50 python3 bench/collective_ab.py --op reduce_scatter --engine copy_engine --sizes 256M,1G \
  --variant l1:$E.PUSH_LANES=1 --variant l2:$E.PUSH_LANES=2 \
  --out $O/rs_ce.json > $O/rs_ce.txt 2>&1; echo "rc=$?" >> $O/rs_ce.txt
