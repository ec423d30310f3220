#!/bin/bash
# session 8, call f (2 H200s): the copy-engine reduce-scatter summing its own row in place
# (no copy into the inbox): checks, then the >= 64 MB all-gathers and reduce-scatters eager and under CUDA
# graphs, timed in rotating rounds; fused reduce-scatter variants at 64 MB under graphs
export PYTHONPATH=$PWD NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
R=$OUT/s8f; mkdir -p $R
timeout 60 python3 -m pytest -m gpu tests/ops/test_fused_collectives.py -k cuda_graph -q -rf -p no:cacheprovider > $R/graph_tests.txt 2>&1; echo "rc=$?" >> $R/graph_tests.txt
timeout 120 python3 bench/check_ops_at_scale.py --world-size 2 --only collectives > $R/check_ops.txt 2>&1; echo "rc=$?" >> $R/check_ops.txt
timeout 200 python3 -m ditron bench collectives --world-size 2 --ops all_gather,reduce_scatter --sizes 64M,256M,1G --graphs --graph-max 1G --out $R/coll > $R/coll.txt 2>&1; echo "rc=$?" >> $R/coll.txt
timeout 90 python3 bench/fused_lab.py --world-size 2 --sizes 64M --ops reduce_scatter --variants default,push:16384:0:16,pull:16384:0:16,push:32768:0:16,pull:32768:0:16,push:8192:0:16,push:16384:264:16 --out $R/fused_lab > $R/fused_lab.txt 2>&1; echo "rc=$?" >> $R/fused_lab.txt
cd $OUT && tar czf s8f.tgz s8f && rm -rf s8f
