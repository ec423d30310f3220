#!/bin/bash
# s22k: a second harness run of the eager rows on the final code (run-to-run spread)
export PYTHONPATH=$PWD NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
O=$OUT/s22k; mkdir -p $O
git log --oneline -1 > $O/commit.txt; git status --short >> $O/commit.txt
timeout 150 python3 -m ditron bench collectives --world-size 2 --ops all_gather,reduce_scatter --engines copy_engine,sm --sizes 64M,96M,128M,256M --busy --out $O/coll > $O/coll.txt 2>&1; echo "rc=$?" >> $O/coll.txt
grep "busy" $O/coll.txt | grep "^\[bench\]" | awk '{print $2,$3,$4,$5,$6,$7}' | head -60
tail -1 $O/coll.txt
