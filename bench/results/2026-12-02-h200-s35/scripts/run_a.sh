#!/usr/bin/env bash
# s35a: the megakernel bench after its move into the package (`ditron bench megakernel`),
# the tuner at 16 and 128 tokens, and num_warps 8 against 4; main's code, 4 layers, bf16,
# W = 1, all configs of a row in the same processes.
set -u
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
O=$OUT/s35a; mkdir -p $O/runs
{ git log --oneline -1; git status --short; nvidia-smi -L; } > $O/commit.txt
mk() { name=$1; shape=$2; t=$3; shift 3; (timeout $t python -m ditron bench megakernel --shape $shape --iters 16 --rounds 2 "$@" --out $O/runs/$name.json > $O/runs/$name.txt 2>&1); { echo "== $name"; grep -h "kernels\|batch\|Error\|tiles \|tuner chose\|<-" $O/runs/$name.txt | grep -v _graph_; } >> $O/summary.txt; }
D=16x128x128x256x4
mk small_tune 16,1024,2816 100 --tune
mk small_w8 16,1024,2816 80 --blocks $D,16x64x256x256x8 --warps 8
mk large_w8 16,4096,11008 80 --blocks $D,16x64x256x256x4 --warps 8
mk t128_tune 128,4096,11008 200 --tune
tar czf $O/runs.tar.gz -C $O runs && rm -rf $O/runs
cat $O/summary.txt
