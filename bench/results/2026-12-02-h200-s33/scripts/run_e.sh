#!/usr/bin/env bash
# s33e: deeper pipelines with thinner K blocks for 64 tokens (4096, 11008; 4 layers, bf16,
# W = 1): 64x128x32 at 8 and 10 stages against the tuner's 64x128x64 at 4; that one with 8
# warps. The working tree.
set -u
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 DITRON_LAUNCH_TIMEOUT=200
O=$OUT/s33e; mkdir -p $O/runs
{ git log --oneline -1; git status --short; nvidia-smi -L; } > $O/commit.txt
pip install --quiet --no-deps -e . > /dev/null 2>&1
mk() { root=$1; name=$2; shape=$3; t=$4; shift 4; (cd $root && PYTHONPATH=$root DITRON_CACHE_DIR=/tmp/cache_$name timeout $t python bench/megakernel.py --shape $shape --iters 16 --rounds 2 "$@" --out $O/runs/$name.json > $O/runs/$name.txt 2>&1); { echo "== $name"; grep -h "batch8\|kernels\|Error" $O/runs/$name.txt | grep -v _graph_; } >> $O/summary.txt; }
T=64,4096,11008
mk $PWD thin $T 120 --blocks 64x128x64x256x4s4,64x128x32x256x4s8,64x128x32x256x4s10
mk $PWD w8 $T 80 --warps 8 --blocks 64x128x64x256x4s4
tar czf $O/runs.tar.gz -C $O runs && rm -rf $O/runs
cat $O/summary.txt
