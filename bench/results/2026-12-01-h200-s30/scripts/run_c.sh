#!/usr/bin/env bash
# s30c: traced megakernels (ditron.task trace=True): the GPU and cuda-backend tests of the
# trace, and where each task's time goes in the decode MLP stacks (one H200, world size 1)
set -u
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 DITRON_LAUNCH_TIMEOUT=200
O=$OUT/s30c; mkdir -p $O
{ git log --oneline -1; git status --short; nvidia-smi -L; } > $O/commit.txt
pip install --quiet --no-deps -e . > /dev/null 2>&1
timeout 100 python -m pytest -q -p no:cacheprovider --ditron-backend cuda tests/task/test_trace.py 2>&1 | tail -4 > $O/trace_tests.txt
for st in 4 2; do
timeout 170 python bench/megakernel.py --shape 16,4096,11008 --layers 4 --blocks 16x32x256x256x4,16x64x128x256x4 --stages $st --iters 16 --rounds 2 --trace $O/tr_4096_st$st --out $O/mk_16x4096x11008_st$st.json > $O/mk_16x4096x11008_st$st.txt 2>&1
done
timeout 100 python bench/megakernel.py --shape 16,1024,2816 --layers 4 --blocks 16x32x64x128x4 --stages 4 --iters 16 --rounds 2 --trace $O/tr_1024 --out $O/mk_16x1024x2816.json > $O/mk_16x1024x2816.txt 2>&1
rm -f $O/*.png
cat $O/*.txt
