#!/bin/bash
# The GPU check the next session should run first (2 H200s, one device call): session 8
# changed the chunked exchanges after its last GPU run (one inbox per size class for the
# graph-safe variants; one body per exchange over exchange.Chunked), CPU-tested only
# (docs/perf.md, session 8, "Changed after the last run of this session").
export PYTHONPATH=$PWD NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
R=$OUT/s8_check; mkdir -p $R
timeout 150 python3 -m pytest -m gpu tests/ops/test_fused_collectives.py tests/ops/test_tp_gemm.py -q -rf -p no:cacheprovider > $R/gpu_tests.txt 2>&1; echo "rc=$?" >> $R/gpu_tests.txt
timeout 250 python3 bench/check_ops_at_scale.py --world-size 2 --only collectives,tp > $R/check_ops.txt 2>&1; echo "rc=$?" >> $R/check_ops.txt
timeout 150 python3 -m ditron bench collectives --world-size 2 --ops all_gather,reduce_scatter --sizes 64M,1G --graphs --graph-max 1G --out $R/coll > $R/coll.txt 2>&1; echo "rc=$?" >> $R/coll.txt
cd $OUT && tar czf s8_check.tgz s8_check && rm -rf s8_check
