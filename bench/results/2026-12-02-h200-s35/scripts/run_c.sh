#!/usr/bin/env bash
# s35c: 128 tokens with the grouped tile order (working tree of s35b): 128-row tiles (one
# row block: the weights are read once) at num_warps 4 and 8, and a traced call of the
# tuner's 64-row choice; 4 layers, bf16, W = 1.
set -u
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
O=$OUT/s35c; mkdir -p $O/runs
{ git log --oneline -1; git status --short; nvidia-smi -L; } > $O/commit.txt
mk() { name=$1; shape=$2; t=$3; shift 3; (timeout $t python -m ditron bench megakernel --shape $shape --iters 16 --rounds 2 "$@" --out $O/runs/$name.json > $O/runs/$name.txt 2>&1); { echo "== $name"; grep -h "kernels\|batch8\|Error\|error:\|traced\|^  *[a-z0-9.]*\.\(up\|down\|reduce\)" $O/runs/$name.txt | grep -v _graph_; } >> $O/summary.txt; }
B=64x128x64x256x4s4,128x64x64x256x4s4,128x64x128x256x4,128x128x64x256x4,128x128x64x256x4s4
mk t128_w4 128,4096,11008 120 --blocks $B
mk t128_w8 128,4096,11008 120 --blocks $B --warps 8
mk t128_traced 128,4096,11008 100 --blocks 64x128x64x256x4s4 --trace $O/runs/tr
tar czf $O/runs.tar.gz -C $O runs && rm -rf $O/runs
cat $O/summary.txt
