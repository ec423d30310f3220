#!/bin/bash
# s18b: the copy-engine all-gather by pushes (exchange.push_gather) against pulls; chunk sizes
export PYTHONPATH=$PWD NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
O=$OUT/s18b; mkdir -p $O
E=ditron.ops.exchange
DITRON_HEAP_SIZE=8G timeout 450 python3 bench/collective_ab.py --op all_gather --engine copy_engine --sizes 64M,96M,256M,512M,1G \
  --variant pull:$E.GATHER_BY=\'pull\' --variant push:$E.GATHER_BY=\'push\' \
  --variant push128:$E.GATHER_BY=\'push\',DITRON_PULL_CHUNK_BYTES=134217728 \
  --variant pusheven:$E.GATHER_BY=\'push\',DITRON_CHUNK_TAPER=1 \
  --out $O/ag_ce.json > $O/ag_ce.txt 2>&1; echo "rc=$?" >> $O/ag_ce.txt
