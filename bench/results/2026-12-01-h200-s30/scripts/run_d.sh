#!/usr/bin/env bash
# s30d: tile functions out of line (noinline callers): GPU tests, the MLP task tests on the
# cuda backend, the decode MLP megakernels by config and num_warps (one H200, world size 1)
set -u
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 DITRON_LAUNCH_TIMEOUT=200
O=$OUT/s30d; mkdir -p $O
{ git log --oneline -1; git status --short; nvidia-smi -L; } > $O/commit.txt
pip install --quiet --no-deps -e . > /dev/null 2>&1
timeout 120 python -m pytest -q -p no:cacheprovider -m gpu tests/task 2>&1 | tail -4 > $O/gpu_tests.txt
timeout 150 python -m pytest -q -p no:cacheprovider --ditron-backend cuda tests/task/test_megakernel.py tests/task/test_trace.py -k "mlp or traced" 2>&1 | tail -4 > $O/cuda_backend_tests.txt
timeout 150 python bench/megakernel.py --shape 16,4096,11008 --layers 4 --blocks 16x32x128x256x4,16x32x256x256x4,16x64x128x256x4 --stages 4 --iters 16 --rounds 2 --out $O/mk_4096_w4.json > $O/mk_4096_w4.txt 2>&1
timeout 120 python bench/megakernel.py --shape 16,4096,11008 --layers 4 --blocks 16x32x256x256x4,16x64x128x256x4 --stages 4 --warps 8 --iters 16 --rounds 2 --trace $O/tr_4096_w8 --out $O/mk_4096_w8.json > $O/mk_4096_w8.txt 2>&1
timeout 90 python bench/megakernel.py --shape 16,1024,2816 --layers 4 --blocks 16x32x64x128x4,16x32x128x256x4 --stages 4 --iters 16 --rounds 2 --out $O/mk_1024_w4.json > $O/mk_1024_w4.txt 2>&1
rm -f $O/*.png $O/tr_*
cat $O/gpu_tests.txt $O/cuda_backend_tests.txt; grep -h "batch8\|kernels\|traced\|layer0\|layer3" $O/mk_*.txt
