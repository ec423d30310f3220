#!/usr/bin/env bash
# s34c: more SMs on the small layers' up tiles with the same bytes per pipeline stage
# (narrow, deep tiles: 64x256, 32x512), and more down tiles (split-K 8); main's code
# (02f9820), 4 layers, bf16, W = 1, all configs of a row in the same processes.
set -u
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
O=$OUT/s34c; mkdir -p $O/runs
{ git log --oneline -1; git status --short; nvidia-smi -L; } > $O/commit.txt
mk() { name=$1; shape=$2; t=$3; shift 3; (timeout $t python bench/megakernel.py --shape $shape --iters 16 --rounds 2 "$@" --out $O/runs/$name.json > $O/runs/$name.txt 2>&1); { echo "== $name"; grep -h "kernels\|Error\|tiles " $O/runs/$name.txt | grep -v _graph_; } >> $O/summary.txt; }
D=16x128x128x256x4
mk small 16,1024,2816 150 --blocks $D,16x64x256x256x4,16x64x256x256x8,16x128x128x256x8,16x32x512x256x4s2,16x64x128x256x8,16x32x256x256x8
mk small_traced 16,1024,2816 80 --blocks $D,16x64x256x256x8 --trace $O/runs/tr
mk large 16,4096,11008 100 --blocks $D,16x64x256x256x4,16x64x256x256x8
tar czf $O/runs.tar.gz -C $O runs && rm -rf $O/runs
cat $O/summary.txt
