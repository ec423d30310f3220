#!/usr/bin/env bash
# s35b: grouped tile order for the task tiles (row blocks of a group consecutive for each
# column block, so they share the weights in L2) against the row-major order of fd12891
# (/tmp/base), alternating; 4 layers, bf16, W = 1.
set -u
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
O=$OUT/s35b; mkdir -p $O/runs
NEW=$PWD; BASE=/tmp/base; rm -rf $BASE; mkdir -p $BASE; git archive fd12891 | tar -x -C $BASE
{ git log --oneline -1; git status --short; git diff --stat; nvidia-smi -L; } > $O/commit.txt
mk() { tree=$1; name=$2; shape=$3; t=$4; shift 4; (cd $tree && PYTHONPATH=$tree timeout $t python -m ditron bench megakernel --shape $shape --iters 16 --rounds 2 "$@" --out $O/runs/$name.json > $O/runs/$name.txt 2>&1); { echo "== $name"; grep -h "kernels\|batch8\|Error\|tuner chose\|<-" $O/runs/$name.txt | grep -v _graph_; } >> $O/summary.txt; }
B128=64x128x64x256x4s4,32x128x128x256x4,32x128x64x256x4s4
mk $BASE t128_base 128,4096,11008 90 --blocks $B128
mk $NEW t128_new 128,4096,11008 90 --blocks $B128
mk $BASE t64_base 64,4096,11008 80 --blocks 64x128x64x256x4s4,32x128x128x256x4
mk $NEW t64_new 64,4096,11008 80 --blocks 64x128x64x256x4s4,32x128x128x256x4
mk $NEW small_new 16,1024,2816 60 --blocks 16x128x128x256x4,16x64x256x256x4
mk $NEW t128_tune 128,4096,11008 200 --tune
tar czf $O/runs.tar.gz -C $O runs && rm -rf $O/runs
cat $O/summary.txt
