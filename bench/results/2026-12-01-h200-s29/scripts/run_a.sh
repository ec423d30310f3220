#!/usr/bin/env bash
# s29a: ditron.task on one H200: GPU tests, the multi-rank tests on the cuda backend, and the
# decode MLP megakernel against torch (eager and CUDA graph) at world size 1.
set -u
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 DITRON_LAUNCH_TIMEOUT=120
O=$OUT/s29a; mkdir -p $O
{ git log --oneline -1; git status --short; nvidia-smi -L; } > $O/commit.txt
pip install --quiet --no-deps -e . > /dev/null 2>&1
timeout 300 python -m pytest -q -p no:cacheprovider tests/task 2>&1 | tail -15 > $O/gpu_tests.txt
timeout 400 python -m pytest -q -p no:cacheprovider --ditron-backend cuda tests/task -x 2>&1 | tail -15 > $O/cuda_backend_tests.txt
timeout 400 python bench/megakernel.py --shape 16,4096,11008 --layers 4 --out $O/mk_16x4096x11008.json > $O/mk_16x4096x11008.txt 2>&1
timeout 300 python bench/megakernel.py --shape 1,4096,11008 --layers 4 --blocks 16x32x128x256 --out $O/mk_1x4096x11008.json > $O/mk_1x4096x11008.txt 2>&1
timeout 300 python bench/megakernel.py --shape 16,1024,2816 --layers 4 --blocks 16x32x64x256,16x16x128x256 --out $O/mk_16x1024x2816.json > $O/mk_16x1024x2816.txt 2>&1
tail -n 12 $O/*.txt
