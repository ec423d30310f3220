#!/bin/bash
# session 7, call c: plain Triton GEMM vs cuBLAS on the small per-rank shapes; GPU-side
# timelines (head start) of the small shapes; colocated GEMM-RS with deferred signals
export PYTHONPATH=$PWD NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
R=$OUT/s7c; mkdir -p $R
timeout 120 python3 bench/gemm_lab.py --shapes 8192x4096x5504,8192x5504x4096 --out $R/gemm_lab > $R/gemm_lab.txt 2>&1; echo "rc=$?" >> $R/gemm_lab.txt
timeout 100 python3 bench/op_timeline.py --world-size 2 --shape 8192,4096,11008 --head-start-us 8000 --impls gemm_rs/colocated,gemm_rs/copy_engine,gemm_rs/baseline > $R/timeline_rs.txt 2>&1; echo "rc=$?" >> $R/timeline_rs.txt
DITRON_RS_DEFER=1 timeout 100 python3 bench/op_timeline.py --world-size 2 --shape 8192,4096,11008 --head-start-us 8000 --impls gemm_rs/colocated > $R/timeline_rs_defer.txt 2>&1; echo "rc=$?" >> $R/timeline_rs_defer.txt
timeout 80 python3 bench/op_timeline.py --world-size 2 --shape 8192,11008,4096 --head-start-us 8000 --impls ag_gemm/overlap,ag_gemm/baseline > $R/timeline_ag.txt 2>&1; echo "rc=$?" >> $R/timeline_ag.txt
DITRON_RS_DEFER=1 timeout 150 python3 -m pytest -m gpu tests/ops/test_tp_gemm.py -q -x > $R/check_defer.txt 2>&1; echo "rc=$?" >> $R/check_defer.txt
cd $OUT && tar czf s7c.tgz s7c && rm -rf s7c
