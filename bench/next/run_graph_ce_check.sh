#!/bin/bash
# Branch s7-graph-ce-allgather: GPU check the next session should run first (2 H200s).
# The graph-safe copy-engine all-gather / reduce-scatter hung in sessions 5 and 6; this
# branch publishes before pulling and stops specialising the signal kernels' slot arguments
# (docs/perf.md session 7, "A likely cause of the graph-safe copy-engine all-gather hang").
export PYTHONPATH=$PWD NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
R=$OUT/graph_ce; mkdir -p $R
DITRON_WAIT_TIMEOUT=20 timeout 120 python3 -m pytest -m gpu tests/ops/test_fused_collectives.py -k cuda_graph -x -q > $R/graph_tests_timeout.txt 2>&1; echo "rc=$?" >> $R/graph_tests_timeout.txt
timeout 120 python3 -m pytest -m gpu tests/ops/test_fused_collectives.py -k cuda_graph -x -q > $R/graph_tests.txt 2>&1; echo "rc=$?" >> $R/graph_tests.txt
timeout 200 python3 -m ditron bench collectives --world-size 2 --ops all_gather,reduce_scatter --sizes 64M,256M,1G --graphs --graph-max 1G --out $R/coll > $R/coll.txt 2>&1; echo "rc=$?" >> $R/coll.txt
