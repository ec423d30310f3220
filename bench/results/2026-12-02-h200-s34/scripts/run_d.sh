#!/usr/bin/env bash
# s34d: the MLP tuner with 64 x 256 tiles among its candidates (the working tree over
# 02f9820): its tests on the cuda backend, then --tune for the small and the large decode
# layers (16 tokens; 4 layers, bf16, W = 1), its choice timed next to the default.
set -u
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
O=$OUT/s34d; mkdir -p $O/runs
{ git log --oneline -1; git status --short; nvidia-smi -L; } > $O/commit.txt
timeout 150 python -m pytest -q -p no:cacheprovider --ditron-backend cuda tests/task/test_mlp_tuner.py 2>&1 | tail -3 > $O/gpu_tests.txt
cat $O/gpu_tests.txt
mk() { name=$1; shape=$2; t=$3; shift 3; (DITRON_CACHE_DIR=/tmp/cache_$name timeout $t python bench/megakernel.py --shape $shape --iters 16 --rounds 2 "$@" --out $O/runs/$name.json > $O/runs/$name.txt 2>&1); { echo "== $name"; grep -h "tuner chose\|batch8\|kernels\|Error\|<-" $O/runs/$name.txt | grep -v _graph_; } >> $O/summary.txt; }
mk tune_small 16,1024,2816 120 --tune
mk tune_large 16,4096,11008 120 --tune
tar czf $O/runs.tar.gz -C $O runs && rm -rf $O/runs
cat $O/summary.txt
