#!/usr/bin/env bash
# s33f: the MLP tuner (with depth 4 among its candidates) for 32 and 128 tokens (4096, 11008;
# 4 layers, bf16, W = 1), its choice timed against torch. Code of 2720e6b.
set -u
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 DITRON_LAUNCH_TIMEOUT=200
O=$OUT/s33f; mkdir -p $O/runs
{ git log --oneline -1; git status --short; nvidia-smi -L; } > $O/commit.txt
pip install --quiet --no-deps -e . > /dev/null 2>&1
mk() { root=$1; name=$2; shape=$3; t=$4; shift 4; (cd $root && PYTHONPATH=$root DITRON_CACHE_DIR=/tmp/cache_$name timeout $t python bench/megakernel.py --shape $shape --iters 16 --rounds 2 "$@" --out $O/runs/$name.json > $O/runs/$name.txt 2>&1); { echo "== $name"; grep -h "tuner chose\|batch8\|kernels\|Error" $O/runs/$name.txt | grep -v _graph_; } >> $O/summary.txt; }
mk $PWD tune32 32,4096,11008 150 --tune
mk $PWD tune128 128,4096,11008 250 --tune
tar czf $O/runs.tar.gz -C $O runs && rm -rf $O/runs
cat $O/summary.txt
