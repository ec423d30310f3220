#!/usr/bin/env bash
# s31e: with the volatile-load waits: the small MLP by tile config, out of line and inlined;
# the large one around 16x128x128x256 (split-K 2 / 8, block_k 64); the GPU-marked task
# tests (CUDA-graph capture). One H200, W = 1.
set -u
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 DITRON_LAUNCH_TIMEOUT=200
O=$OUT/s31e; mkdir -p $O/runs
{ git log --oneline -1; git status --short; nvidia-smi -L; } > $O/commit.txt
pip install --quiet --no-deps -e . > /dev/null 2>&1
timeout 120 python -m pytest -q -p no:cacheprovider -m gpu tests/task 2>&1 | tail -4 > $O/gpu_tests.txt
mk() { name=$1; shift; timeout 110 python bench/megakernel.py --layers 4 --iters 16 --rounds 2 --stages 3 --warps 4 --out $O/runs/$name.json "$@" > $O/runs/$name.txt 2>&1; }
mk small_outline --shape 16,1024,2816 --blocks 16x64x128x128x4,16x128x128x256x4,16x32x64x128x4
mk small_inline --shape 16,1024,2816 --blocks 16x64x128x128x4,16x128x128x256x4,16x32x64x128x4 --inline
mk big --shape 16,4096,11008 --blocks 16x128x128x256x2,16x128x128x256x8,16x128x64x256x4
tar czf $O/runs.tar.gz -C $O runs
for f in $O/runs/*.txt; do echo "== $(basename $f)"; grep -h "batch8\|kernels" $f; done > $O/summary.txt
rm -rf $O/runs
cat $O/gpu_tests.txt $O/summary.txt
