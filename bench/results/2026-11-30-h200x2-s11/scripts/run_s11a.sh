#!/bin/bash
# session 11, call a (2 H200s): the graph-safe copy-engine all-gather's pulls start from a
# mark taken before its publishes (not behind them); checks, then a chunk-size sweep of the
# copy-engine all-gather / reduce-scatter at >= 64 MB, eager and under CUDA graphs; then
# ee889b5 (no capture of gloo collectives) on one H200 shared by two ranks
export PYTHONPATH=$PWD NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
R=$OUT/s11a; mkdir -p $R
git log --oneline -1 > $R/commit.txt; git status --short >> $R/commit.txt
timeout 60 python3 -m pytest -m gpu tests/ops/test_fused_collectives.py -k cuda_graph -q -rf -p no:cacheprovider > $R/graph_tests.txt 2>&1; echo "rc=$?" >> $R/graph_tests.txt
DITRON_WAIT_TIMEOUT=20 DITRON_PULL_CHUNK_BYTES=1024 timeout 60 python3 -m pytest -m gpu tests/ops/test_fused_collectives.py -k cuda_graph -q -rf -p no:cacheprovider > $R/graph_tests_chunked.txt 2>&1; echo "rc=$?" >> $R/graph_tests_chunked.txt
for cb in 67108864 16777216 4194304; do
  DITRON_PULL_CHUNK_BYTES=$cb timeout 110 python3 -m ditron bench collectives --world-size 2 --ops all_gather,reduce_scatter --engines copy_engine --sizes 64M,96M,256M,512M,1G --graphs --graph-max 1G --out $R/coll_cb$cb > $R/coll_cb$cb.txt 2>&1; echo "rc=$?" >> $R/coll_cb$cb.txt
done
DITRON_CACHE_DIR=$R/tp_cache CUDA_VISIBLE_DEVICES=0 timeout 150 python3 -m ditron bench tp-gemm --world-size 2 --ops rs --shapes 4096x11008 --scale 0.5 --tune --graphs --out $R/tp_shared > $R/tp_shared.txt 2>&1; echo "rc=$?" >> $R/tp_shared.txt
cd $OUT && tar czf s11a.tgz s11a && rm -rf s11a
