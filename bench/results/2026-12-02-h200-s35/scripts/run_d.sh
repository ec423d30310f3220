#!/usr/bin/env bash
# s35d: the tuner with warps (8 for tiles of >= 64 rows), 128-row tiles and the untuned
# default for the tokens (default_blocks), grouped tile order; 4 layers, bf16, W = 1.
set -u
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export DITRON_CACHE_DIR=$OUT/s35d/cache
O=$OUT/s35d; mkdir -p $O/runs
{ git log --oneline -1; git status --short; nvidia-smi -L; } > $O/commit.txt
mk() { name=$1; shape=$2; t=$3; shift 3; (timeout $t python -m ditron bench megakernel --shape $shape --iters 16 --rounds 2 "$@" --out $O/runs/$name.json > $O/runs/$name.txt 2>&1); { echo "== $name"; grep -h "kernels\|batch8\|Error\|error:\|tuner chose\|<-" $O/runs/$name.txt | grep -v _graph_; } >> $O/summary.txt; }
mk t128_tune 128,4096,11008 170 --tune
mk t64_tune 64,4096,11008 170 --tune
mk t256 256,4096,11008 60
mk small_tune 16,1024,2816 60 --tune
tar czf $O/runs.tar.gz -C $O runs cache && rm -rf $O/runs $O/cache
cat $O/summary.txt
