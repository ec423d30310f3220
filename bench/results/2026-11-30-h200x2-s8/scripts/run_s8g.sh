#!/bin/bash
# session 8, call g (2 H200s): fused reduce-scatter with 32768-element steps from 32 MB
# per launch: the fused families checked, then reduce-scatters of 64 and 96 MB
export PYTHONPATH=$PWD NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
R=$OUT/s8g; mkdir -p $R
timeout 140 python3 bench/check_ops_at_scale.py --world-size 2 --only fused > $R/check_ops_fused.txt 2>&1; echo "rc=$?" >> $R/check_ops_fused.txt
timeout 80 python3 -m ditron bench collectives --world-size 2 --ops reduce_scatter --sizes 64M,96M --graphs --graph-max 128M --out $R/coll > $R/coll.txt 2>&1; echo "rc=$?" >> $R/coll.txt
cd $OUT && tar czf s8g.tgz s8g && rm -rf s8g
