#!/usr/bin/env bash
# s30b: arguments fixed at compile (the epoch from the ticket counter), a bound launch and
# CUDA-graph capture of the megakernel: GPU tests, the task tests on the cuda backend, the
# decode MLP megakernel against torch with kernel and host times (one H200, world size 1)
set -u
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 DITRON_LAUNCH_TIMEOUT=200
O=$OUT/s30b; mkdir -p $O
{ git log --oneline -1; git status --short; nvidia-smi -L; } > $O/commit.txt
pip install --quiet --no-deps -e . > /dev/null 2>&1
timeout 150 python -m pytest -q -p no:cacheprovider -m gpu tests/task 2>&1 | tail -5 > $O/gpu_tests.txt
timeout 150 python bench/megakernel.py --shape 16,1024,2816 --layers 4 --blocks 16x32x128x256x2,16x32x64x128x4 --stages 4 --iters 24 --out $O/mk_16x1024x2816.json > $O/mk_16x1024x2816.txt 2>&1
timeout 200 python bench/megakernel.py --shape 16,4096,11008 --layers 4 --blocks 16x64x128x256x4,16x32x256x256x4 --stages 4 --iters 24 --out $O/mk_16x4096x11008.json > $O/mk_16x4096x11008.txt 2>&1
timeout 240 python -m pytest -q -p no:cacheprovider --ditron-backend cuda tests/task 2>&1 | tail -8 > $O/cuda_backend_tests.txt
cat $O/*.txt
