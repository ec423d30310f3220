#!/usr/bin/env bash
# s38a: the megakernel's GEMM tiles loading through TMA descriptors (t1) against pointers
# (t0), same tiles, one process per shape; 4 layers, bf16, W = 1, weights as nn.Linear.
set -u
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export DITRON_CACHE_DIR=$OUT/s38a/cache
O=$OUT/s38a; mkdir -p $O/runs
{ git log --oneline -1; git status --short; nvidia-smi -L; } > $O/commit.txt
mk() { name=$1; shape=$2; t=$3; shift 3; (timeout $t python -m ditron bench megakernel --shape $shape --iters 16 --rounds 2 "$@" --out $O/runs/$name.json > $O/runs/$name.txt 2>&1); { echo "== $name"; grep -h "kernels\|batch8\|Error\|error:\|<-" $O/runs/$name.txt | grep -v _graph_; } >> $O/summary.txt; }
mk t256 256,4096,11008 120 --blocks 128x128x64x256x4s4w8t0,128x128x64x256x4s4w8t1,128x128x64x256x4s3w8t1
mk t128 128,4096,11008 120 --blocks 128x128x64x256x4s4w8t0,128x128x64x256x4s4w8t1,128x128x128x256x4s3w8t1
mk t64 64,4096,11008 100 --blocks 64x128x64x256x4s4t0,64x128x64x256x4s4t1
mk t16 16,4096,11008 100 --blocks 16x128x128x256x4t0,16x128x128x256x4t1
tar czf $O/runs.tar.gz -C $O runs && rm -rf $O/runs $O/cache
cat $O/summary.txt
