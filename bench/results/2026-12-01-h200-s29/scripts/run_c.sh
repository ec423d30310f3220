#!/usr/bin/env bash
# s29c: block waits and 4 programs per SM: GPU tests, then the decode MLP megakernel against
# torch per tile config, num_stages and programs (one H200, world size 1)
set -u
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 DITRON_LAUNCH_TIMEOUT=200
O=$OUT/s29c; mkdir -p $O
{ git log --oneline -1; git status --short; nvidia-smi -L; } > $O/commit.txt
pip install --quiet --no-deps -e . > /dev/null 2>&1
timeout 200 python -m pytest -q -p no:cacheprovider tests/task tests/runtime/test_timeout.py 2>&1 | tail -5 > $O/gpu_tests.txt
timeout 300 python -m pytest -q -p no:cacheprovider --ditron-backend cuda tests/task tests/runtime/test_timeout.py 2>&1 | tail -15 > $O/cuda_backend_tests.txt
B=16x64x128x256,16x32x256x256,16x64x256x256
for st in 3 4; do
  timeout 200 python bench/megakernel.py --shape 16,4096,11008 --layers 4 --blocks $B --stages $st --iters 24 --out $O/mk_16x4096x11008_st$st.json > $O/mk_16x4096x11008_st$st.txt 2>&1
done
timeout 150 python bench/megakernel.py --shape 16,4096,11008 --layers 4 --blocks $B --stages 4 --programs 132 --iters 24 --out $O/mk_16x4096x11008_p132.json > $O/mk_16x4096x11008_p132.txt 2>&1
timeout 150 python bench/megakernel.py --shape 16,1024,2816 --layers 4 --blocks 16x32x128x256,16x32x64x128 --stages 4 --iters 24 --out $O/mk_16x1024x2816.json > $O/mk_16x1024x2816.txt 2>&1
tail -n 12 $O/*.txt
