#!/bin/bash
# session 8, call a (2 H200s): the graph-safe copy-engine all-gather / reduce-scatter
# (publishes before pulls; hung in sessions 5 and 6), then the overlap trace's fifth field
export PYTHONPATH=$PWD NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
R=$OUT/s8a; mkdir -p $R
nvidia-smi --query-gpu=name,memory.used --format=csv > $R/gpus.txt 2>&1
DITRON_WAIT_TIMEOUT=20 timeout 100 python3 -m pytest -m gpu tests/ops/test_fused_collectives.py -k cuda_graph -x -q -rf -p no:cacheprovider > $R/graph_tests_timeout.txt 2>&1; echo "rc=$?" >> $R/graph_tests_timeout.txt
timeout 90 python3 -m pytest -m gpu tests/ops/test_fused_collectives.py -k cuda_graph -x -q -rf -p no:cacheprovider > $R/graph_tests.txt 2>&1; echo "rc=$?" >> $R/graph_tests.txt
timeout 200 python3 -m ditron bench collectives --world-size 2 --ops all_gather,reduce_scatter --sizes 64M,256M,1G --graphs --graph-max 1G --out $R/coll > $R/coll.txt 2>&1; echo "rc=$?" >> $R/coll.txt
timeout 70 python3 -m ditron trace --op gemm_rs --world-size 2 --m 8192 --n 4096 --k 5504 --calls 3 --backend cuda --out $R/trace_rs > $R/trace_rs.txt 2>&1; echo "rc=$?" >> $R/trace_rs.txt
timeout 60 python3 -m ditron trace --op ag_gemm --world-size 2 --m 8192 --n 11008 --k 4096 --calls 3 --backend cuda --out $R/trace_ag > $R/trace_ag.txt 2>&1; echo "rc=$?" >> $R/trace_ag.txt
cd $OUT && tar czf s8a.tgz s8a && rm -rf s8a
