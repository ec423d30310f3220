#!/usr/bin/env bash
# s34b: L2 prefetch of the weights (MlpBlocks.prefetch, the working tree): GPU tests of the
# task level, then each config with and without `p` in the same processes (rounds rotate),
# 4 layers, bf16, W = 1; one traced run of the small layers.
set -u
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
O=$OUT/s34b; mkdir -p $O/runs
{ git log --oneline -1; git status --short; nvidia-smi -L; } > $O/commit.txt
timeout 200 python -m pytest -q -p no:cacheprovider -m gpu tests/task 2>&1 | tail -3 > $O/gpu_tests.txt
timeout 100 python -m pytest -q -p no:cacheprovider --ditron-backend cuda tests/task/test_megakernel.py -k bf16 2>&1 | tail -3 >> $O/gpu_tests.txt
cat $O/gpu_tests.txt
mk() { name=$1; shape=$2; t=$3; shift 3; (timeout $t python bench/megakernel.py --shape $shape --iters 16 --rounds 2 "$@" --out $O/runs/$name.json > $O/runs/$name.txt 2>&1); { echo "== $name"; grep -h "batch8\|kernels\|Error\|tiles " $O/runs/$name.txt | grep -v _graph_; } >> $O/summary.txt; }
D=16x128x128x256x4
mk small 16,1024,2816 80 --blocks $D,${D}p
mk large 16,4096,11008 80 --blocks $D,${D}p
mk t64 64,4096,11008 80 --blocks 64x128x64x256x4s4,64x128x64x256x4s4p
mk small_traced 16,1024,2816 80 --blocks $D,${D}p --trace $O/runs/tr
mk small2 16,1024,2816 80 --blocks ${D}p,$D
tar czf $O/runs.tar.gz -C $O runs && rm -rf $O/runs
cat $O/summary.txt
