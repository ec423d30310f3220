#!/bin/bash
# s9a: session 8's CPU-only exchange changes on 2 H200s, then the local GEMM on the GEMM-RS
# half shapes (the own rows of a fused-sum variant) against cuBLAS on one GPU.
export PYTHONPATH=$PWD NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
nvidia-smi --query-gpu=name,clocks.sm,temperature.gpu --format=csv > $OUT/smi.txt 2>&1
bash bench/next/check_s8_cpu_only.sh
mkdir -p $OUT/s9a
git rev-parse HEAD > $OUT/s9a/commit.txt 2>/dev/null
CUDA_VISIBLE_DEVICES=0 timeout 150 python3 bench/gemm_lab.py --shapes 4096x4096x5504,4096x4096x7168,4096x3584x7168,2048x4096x5504,8192x4096x5504 --out $OUT/s9a > $OUT/s9a/gemm_lab.txt 2>&1; echo "rc=$?" >> $OUT/s9a/gemm_lab.txt
cp $OUT/smi.txt $OUT/s9a/
cd $OUT && tar czf s9a.tgz s9a && rm -rf s9a
