#!/usr/bin/env bash
# s38c: descriptor loads (t1) against pointers (t0) at 128 and 32 tokens and on the small
# layers; at 256 tokens, fewer split-K chunks and narrower tiles with descriptors, then the
# tuner (its candidates take add_tp_mlp's TMA default); 4 layers, bf16, W = 1.
set -u
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export DITRON_CACHE_DIR=$OUT/s38c/cache
O=$OUT/s38c; mkdir -p $O/runs
{ git log --oneline -1; git status --short; nvidia-smi -L; } > $O/commit.txt
mk() { name=$1; shape=$2; t=$3; shift 3; (timeout $t python -m ditron bench megakernel --shape $shape --iters 16 --rounds 2 "$@" --out $O/runs/$name.json > $O/runs/$name.txt 2>&1); { echo "== $name"; grep -h "kernels\|batch8\|Error\|error:\|tuner chose\|<-" $O/runs/$name.txt | grep -v _graph_; } >> $O/summary.txt; }
mk t128 128,4096,11008 100 --blocks 128x128x64x256x4s4w8t0,128x128x64x256x4s4w8t1
mk t32 32,4096,11008 100 --blocks 32x128x128x256x4t0,32x128x128x256x4t1
mk small 16,1024,2816 100 --blocks 16x128x128x256x4t0,16x128x128x256x4t1,16x64x256x256x4t0,16x64x256x256x4t1
mk t256 256,4096,11008 120 --blocks 128x128x64x256x2s4w8t1,128x128x64x256x1s4w8t1,128x64x64x256x4s4w8t1,128x64x128x256x2s3w8t1
mk t256_tune 256,4096,11008 200 --tune
tar czf $O/runs.tar.gz -C $O runs cache && rm -rf $O/runs $O/cache
cat $O/summary.txt
