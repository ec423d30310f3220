#!/bin/bash
# s19h: the eager pushes as driver calls (raw) against the generic path, NCCL in the same run
export PYTHONPATH=$PWD NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
O=$OUT/s19h; mkdir -p $O
R=ditron.ops.raw_pushes.ENABLED
for op in all_gather reduce_scatter; do
DITRON_HEAP_SIZE=3G timeout 75 python3 bench/collective_ab.py --op $op --engine copy_engine --sizes 64M,128M,256M \
  --variant raw:$R=True --variant generic:$R=False --rounds 4 --out $O/$op.json > $O/$op.txt 2>&1; echo "rc=$?" >> $O/$op.txt
cat $O/$op.txt
done
