#!/bin/bash
# The GPU check the next session should run first (2 H200s, one device call, ~5 min):
# session 9 changed these after its last GPU run (docs/perf.md, session 9, "Changed after
# the last run"), CPU-tested only:
#  - pull_gather publishes before it pulls wherever its waits are kernels (timeout mode);
#  - the graph-safe push_reduce_scatter: only the first push to a peer waits for its ack;
#  - the graph-safe AG-GEMM acknowledges in a `finally`;
#  - the benchmarks' CUDA-graph capture is one helper (ditron/benchmarks/capture.py).
export PYTHONPATH=$PWD NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
R=$OUT/s9_check; mkdir -p $R
timeout 120 python3 -m pytest -m gpu tests/ops/test_fused_collectives.py tests/ops/test_tp_gemm.py -q -rf -p no:cacheprovider > $R/gpu_tests.txt 2>&1; echo "rc=$?" >> $R/gpu_tests.txt
DITRON_WAIT_TIMEOUT=30 timeout 150 python3 bench/check_ops_at_scale.py --world-size 2 --only collectives > $R/check_ops_timeout.txt 2>&1; echo "rc=$?" >> $R/check_ops_timeout.txt
timeout 150 python3 -m ditron bench collectives --world-size 2 --ops reduce_scatter --sizes 64M,96M,256M --graphs --graph-max 256M --out $R/coll > $R/coll.txt 2>&1; echo "rc=$?" >> $R/coll.txt
timeout 120 python3 -m ditron bench tp-gemm --world-size 2 --ops ag,rs --shapes 11008x4096,4096x11008 --graphs --out $R/tp > $R/tp.txt 2>&1; echo "rc=$?" >> $R/tp.txt
cd $OUT && tar czf s9_check.tgz s9_check && rm -rf s9_check
