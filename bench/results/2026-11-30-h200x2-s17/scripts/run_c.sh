#!/bin/bash
# s17c: engines hold local tensors until drain (no record_stream): host time per eager call;
# the all-gather's taper policy eagerly and under graphs; the reduce-scatter
export PYTHONPATH=$PWD NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
O=$OUT/s17c; mkdir -p $O
DITRON_HEAP_SIZE=2G timeout 120 python3 bench/results/2026-11-30-h200x2-s17/scripts/prof.py > $O/prof.txt 2>&1; echo "rc=$?" >> $O/prof.txt
E=ditron.ops.exchange
DITRON_HEAP_SIZE=6G timeout 200 python3 bench/collective_ab.py --op all_gather --engine copy_engine --sizes 64M,96M,256M,512M,1G \
  --variant auto:$E.PULL_TAPER=None --variant even:$E.PULL_TAPER=False --variant taper:$E.PULL_TAPER=True \
  --out $O/ag_ce.json > $O/ag_ce.txt 2>&1; echo "rc=$?" >> $O/ag_ce.txt
DITRON_HEAP_SIZE=6G timeout 120 python3 bench/collective_ab.py --op reduce_scatter --engine copy_engine --sizes 64M,96M,256M,512M,1G \
  --variant ce: --out $O/rs_ce.json > $O/rs_ce.txt 2>&1; echo "rc=$?" >> $O/rs_ce.txt
