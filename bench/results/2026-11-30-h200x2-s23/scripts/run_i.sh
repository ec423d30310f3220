#!/bin/bash
# s23i: GPU timeline of GEMM-RS 4096 x 11008 under CUDA graphs (pulled engine, the bare GEMM, cuBLAS + NCCL)
export PYTHONPATH=$PWD NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
O=$OUT/s23i; mkdir -p $O
git log --oneline -1 > $O/commit.txt; git status --short >> $O/commit.txt
timeout 100 python3 bench/op_timeline.py --world-size 2 --shape 8192,4096,11008 --graph \
  --impls "gemm_rs/gemm,gemm_rs/copy_engine_pull,gemm_rs/copy_engine" > $O/timeline_graph.txt 2>&1
echo "rc=$?" >> $O/timeline_graph.txt
grep -v "^\s*s[0-9]" $O/timeline_graph.txt | head -80
