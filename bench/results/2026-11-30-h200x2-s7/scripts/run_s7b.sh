#!/bin/bash
# session 7, call b: copy engines beside a GEMM; steady-state timelines; host cost by function
export PYTHONPATH=$PWD NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
R=$OUT/s7b; mkdir -p $R
timeout 60 python3 bench/copy_under_gemm.py --size 32M --gemm 8192,5504,4096 > $R/copy_under_gemm_ag.txt 2>&1; echo "rc=$?" >> $R/copy_under_gemm_ag.txt
timeout 60 python3 bench/copy_under_gemm.py --size 32M --gemm 4096,4096,5504 > $R/copy_under_gemm_rs.txt 2>&1; echo "rc=$?" >> $R/copy_under_gemm_rs.txt
timeout 100 python3 bench/op_timeline.py --world-size 2 --shape 8192,4096,11008 --impls gemm_rs/copy_engine,gemm_rs/colocated,gemm_rs/baseline > $R/timeline_rs.txt 2>&1; echo "rc=$?" >> $R/timeline_rs.txt
timeout 80 python3 bench/op_timeline.py --world-size 2 --shape 8192,11008,4096 --impls ag_gemm/overlap,ag_gemm/baseline > $R/timeline_ag.txt 2>&1; echo "rc=$?" >> $R/timeline_ag.txt
timeout 150 python3 bench/host_profile.py --world-size 2 --sizes "" --tp 8192,4096,11008 --cprofile gemm_rs/copy_engine,ag_gemm/overlap --out /tmp/hp > $R/host_profile.txt 2>&1; echo "rc=$?" >> $R/host_profile.txt
cd $OUT && tar czf s7b.tgz s7b && rm -rf s7b
