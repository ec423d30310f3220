#!/bin/bash
# session 7, call a: where the small TP-GEMM shapes lose time (host breakdown, GPU timelines,
# tile trace) and GEMM-RS after the tuner with the final copy-engine scheme
export PYTHONPATH=$PWD NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
R=$OUT/s7a; mkdir -p $R
git log --oneline -1 > $R/commit.txt 2>&1
timeout 70 python3 bench/host_breakdown.py --world-size 2 --calls 100 > $R/host_breakdown.txt 2>&1; echo "rc=$?" >> $R/host_breakdown.txt
timeout 100 python3 bench/op_timeline.py --world-size 2 --shape 8192,4096,11008 --impls gemm_rs/copy_engine,gemm_rs/colocated,gemm_rs/baseline > $R/timeline_rs.txt 2>&1; echo "rc=$?" >> $R/timeline_rs.txt
timeout 80 python3 bench/op_timeline.py --world-size 2 --shape 8192,11008,4096 --impls ag_gemm/overlap,ag_gemm/baseline > $R/timeline_ag.txt 2>&1; echo "rc=$?" >> $R/timeline_ag.txt
timeout 60 python3 -m ditron trace --op gemm_rs --world-size 2 --m 8192 --n 4096 --k 5504 --calls 3 --backend cuda --out $R/trace_rs > $R/trace_rs.txt 2>&1; echo "rc=$?" >> $R/trace_rs.txt
export DITRON_CACHE_DIR=$R/cache
timeout 200 python3 -m ditron bench tp-gemm --world-size 2 --ops rs --tune --out $R/tp_gemm_rs > $R/tp_gemm_rs.txt 2>&1; echo "rc=$?" >> $R/tp_gemm_rs.txt
cd $OUT && tar czf s7a.tgz s7a && rm -rf s7a
