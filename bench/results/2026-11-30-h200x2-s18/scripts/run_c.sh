#!/bin/bash
# s18c: local work beside peer copies (ce_lab2.py); the all-gather's local copies by memcpy or by a kernel
export PYTHONPATH=$PWD NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
O=$OUT/s18c; mkdir -p $O
DITRON_HEAP_SIZE=3G timeout 120 python3 bench/results/2026-11-30-h200x2-s18/scripts/ce_lab2.py > $O/ce_lab2.txt 2>&1; echo "rc=$?" >> $O/ce_lab2.txt
cat $O/ce_lab2.txt
E=ditron.ops.exchange
DITRON_HEAP_SIZE=8G timeout 400 python3 bench/collective_ab.py --op all_gather --engine copy_engine --sizes 96M,256M,512M,1G \
  --variant pull:$E.GATHER_BY=\'pull\',$E.LOCAL_COPY=\'memcpy\' --variant pullk:$E.GATHER_BY=\'pull\',$E.LOCAL_COPY=\'kernel\' \
  --variant push:$E.GATHER_BY=\'push\',$E.LOCAL_COPY=\'memcpy\' --variant pushk:$E.GATHER_BY=\'push\',$E.LOCAL_COPY=\'kernel\' \
  --out $O/ag_ce.json > $O/ag_ce.txt 2>&1; echo "rc=$?" >> $O/ag_ce.txt
