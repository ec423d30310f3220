#!/bin/bash
# s16b: copy-engine all-gather / reduce-scatter >= 64 MB with tapered chunks (growth 3, 2)
# against even chunks (DITRON_CHUNK_TAPER=1), each run with NCCL in it.
export PYTHONPATH=$PWD NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
R=$OUT/s16b; mkdir -p $R
for t in 1 3 2; do
  n=$((n+1))
  DITRON_CHUNK_TAPER=$t timeout 115 python3 -m ditron bench collectives --world-size 2 --ops all_gather,reduce_scatter --engines copy_engine --sizes 64M,96M,256M,512M,1G --graphs --graph-max 1G --busy --out $R/coll_t${t}_$n > $R/coll_t${t}_$n.txt 2>&1; echo "rc=$?" >> $R/coll_t${t}_$n.txt
  grep -E "graph|busy|rc=" $R/coll_t${t}_$n.txt | grep -v "sm " | tail -32
done
