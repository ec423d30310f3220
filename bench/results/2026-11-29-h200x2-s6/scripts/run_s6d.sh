#!/bin/bash
# session 6, call d: hybrid ceilings; tp-gemm after the tuner (fast launch, copy-engine driver path, chunked GEMM-RS); collectives >= 64 MB
export PYTHONPATH=$PWD NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
R=$OUT/s6d; mkdir -p $R
timeout 50 python3 bench/peer_bandwidth.py --size 256M --sm --out $R > $R/peer_bandwidth.txt 2>&1; echo "rc=$?" >> $R/peer_bandwidth.txt
export DITRON_CACHE_DIR=$R/cache
timeout 370 python3 -m ditron bench tp-gemm --world-size 2 --tune --out $R/tp_gemm_w2 > $R/tp_gemm_w2.txt 2>&1; echo "rc=$?" >> $R/tp_gemm_w2.txt
timeout 120 python3 -m ditron bench collectives --world-size 2 --ops all_gather,reduce_scatter --sizes 64M,256M,1G --engines copy_engine,sm --busy --out $R/coll > $R/coll.txt 2>&1; echo "rc=$?" >> $R/coll.txt
