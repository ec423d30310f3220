#!/usr/bin/env bash
# s32c: the MLP tuner's tests on the cuda backend (host barriers around the cache write),
# then bench/megakernel.py --tune: tune_mlp over its GPU candidates (2 layers), then the
# default and the tuned config timed against torch (4 layers). One H200, W = 1.
set -u
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 DITRON_LAUNCH_TIMEOUT=200
O=$OUT/s32c; mkdir -p $O
{ git log --oneline -1; git status --short; nvidia-smi -L; } > $O/commit.txt
pip install --quiet --no-deps -e . > /dev/null 2>&1
timeout 150 python -m pytest -q -p no:cacheprovider --tb=short --ditron-backend cuda tests/task/test_mlp_tuner.py 2>&1 | tail -30 > $O/cuda_tests.txt
cat $O/cuda_tests.txt
for shape in 16,1024,2816 16,4096,11008 64,4096,11008; do
  n=mk_${shape//,/_}
  DITRON_CACHE_DIR=/tmp/cache_$n timeout 150 python bench/megakernel.py --shape $shape --tune --iters 16 --rounds 2 --out $O/$n.json > $O/$n.txt 2>&1
  grep -h "tune\]\|tuner\|batch8\|kernels\|Error" $O/$n.txt | tr '\r' '\n' | grep -v "build [0-9]" 
done
