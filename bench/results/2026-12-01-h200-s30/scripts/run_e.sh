#!/usr/bin/env bash
# s30e: the final code: GPU tests; the small MLP with tiles inlined and out of line; the
# large one at num_warps 8 with split-K 4 and 8 (one H200, world size 1)
set -u
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 DITRON_LAUNCH_TIMEOUT=200
O=$OUT/s30e; mkdir -p $O
{ git log --oneline -1; git status --short; nvidia-smi -L; } > $O/commit.txt
pip install --quiet --no-deps -e . > /dev/null 2>&1
timeout 120 python -m pytest -q -p no:cacheprovider -m gpu tests/task 2>&1 | tail -4 > $O/gpu_tests.txt
for mode in inline outline; do
  flag=""; [ $mode = inline ] && flag="--inline"
  timeout 80 python bench/megakernel.py --shape 16,1024,2816 --layers 4 --blocks 16x32x64x128x4 --stages 4 --iters 16 --rounds 2 $flag --out $O/mk_1024_$mode.json > $O/mk_1024_$mode.txt 2>&1
done
timeout 120 python bench/megakernel.py --shape 16,4096,11008 --layers 4 --blocks 16x32x256x256x4,16x32x256x256x8 --stages 4 --warps 8 --iters 16 --rounds 2 --out $O/mk_4096_w8.json > $O/mk_4096_w8.txt 2>&1
cat $O/gpu_tests.txt; grep -h "layers:\|batch8\|kernels" $O/mk_*.txt
