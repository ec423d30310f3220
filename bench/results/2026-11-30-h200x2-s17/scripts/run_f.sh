#!/bin/bash
# s17f: ready flags under graphs (stream memory operations): the GPU tests, the collectives harness
export PYTHONPATH=$PWD NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
O=$OUT/s17f; mkdir -p $O
timeout 100 python3 -m ditron bench collectives --world-size 2 --ops all_gather,reduce_scatter --engines copy_engine --sizes 64M,96M,256M,512M,1G --graphs --graph-max 1G --out $O/coll > $O/coll.txt 2>&1; echo "rc=$?" >> $O/coll.txt
timeout 280 python3 -m pytest -q -m gpu tests/ > $O/gpu_tests.txt 2>&1; echo "rc=$?" >> $O/gpu_tests.txt
