#!/bin/bash
# s20e: eager copy-engine exchanges tapered from 16 MB parts against 64 MB (the raw pushes'
# extra chunks cost little host time); the tuned GEMM-RS benchmark (eager and CUDA graphs)
export PYTHONPATH=$PWD NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
O=$OUT/s20e; mkdir -p $O
git log --oneline -1 > $O/commit.txt; git status --short >> $O/commit.txt
E=ditron.ops.exchange
for op in all_gather reduce_scatter; do
DITRON_HEAP_SIZE=4G timeout 100 python3 bench/collective_ab.py --op $op --engine copy_engine --sizes 64M,96M,128M --rounds 4 \
  --variant t64:$E.TAPER_MIN_BYTES=67108864 --variant t16:$E.TAPER_MIN_BYTES=16777216 \
  --out $O/$op.json > $O/$op.txt 2>&1; echo "rc=$?" >> $O/$op.txt
grep "eager\|rc=" $O/$op.txt
done
DITRON_CACHE_DIR=$(mktemp -d) timeout 380 python3 -m ditron bench tp-gemm --world-size 2 --ops rs --tune --graphs --out $O/tp_rs > $O/tp_rs.txt 2>&1; echo "rc=$?" >> $O/tp_rs.txt
tail -24 $O/tp_rs.txt
